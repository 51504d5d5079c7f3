/* Learning-rate schedule: linear warmup, then half a cosine down to min_lr. */
#include "nn.h"

#include <math.h>

float attn_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, float peak_lr,
                            float min_lr)
{
    if (step < 0) step = 0;
    if (warmup > 0 && step < warmup)
        return (float)((double)peak_lr * (double)(step + 1) / (double)warmup);
    /* Steps warmup .. total-1 map to progress 0 .. 1. */
    const int64_t span = total - warmup - 1;
    double progress = span > 0 ? (double)(step - warmup) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    if (progress < 0.0) progress = 0.0;
    const double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)((double)min_lr + ((double)peak_lr - (double)min_lr) * cosine);
}
