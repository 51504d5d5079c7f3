/* The bfloat16 accuracy rule (bf16_judge.h). */
#include "bf16_judge.h"

#include <math.h>

double bf16_max_err(const double *x, const double *ref, int64_t n, double *refmax)
{
    double e = 0.0, m = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (!isfinite(ref[i])) {
            if (!(x[i] == ref[i])) e = INFINITY;
            continue;
        }
        const double d = isfinite(x[i]) ? fabs(x[i] - ref[i]) : INFINITY;
        e = d > e ? d : e;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    *refmax = m;
    return e;
}

void bf16_judge(tu_group *g, const char *what, const double *got, const double *ref,
                const double *base, int64_t n, double *worst)
{
    double mx, mx2;
    const double ea = bf16_max_err(got, ref, n, &mx), eb = bf16_max_err(base, ref, n, &mx2);
    const double allow = 2.0 * eb + BF16_CONTRACT_SLACK * mx;
    const double ratio = allow > 0 ? ea / allow : (ea > 0 ? INFINITY : 0);
    if (ratio > *worst) *worst = ratio;
    if (tu_check(g, ea <= allow, "%s: error %.3g > 2 × baseline %.3g + slack %.3g (max |ref| %.3g)",
                 what, ea, eb, BF16_CONTRACT_SLACK * mx, mx) &&
        g->suite && g->suite->verbose)
        tu_group_note(g, "%s: error %.3g, baseline %.3g (%.2f of the allowance)", what, ea, eb,
                      ratio);
}
