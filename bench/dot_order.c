/* Accuracy of the two summation orders of a score q·k (README, "How a
 * decoding step runs"): the packed GEMM's fused multiply-add chain over the
 * features, against scores_rows' VW lanes (lane i: features i, i+VW, …)
 * added by a tree of halves. Errors in units of u·Σ|q_l·k_l| (u = 2^-24)
 * over 200000 random pairs per shape, against the float64 sum.
 *   cc -O2 -ffp-contract=off bench/dot_order.c -lm -o /tmp/dot_order && /tmp/dot_order */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double normal(void)
{
    const double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int main(void)
{
    enum { PAIRS = 200000 };
    const int dims[] = {16, 24, 64, 128}, widths[] = {8, 16};
    for (int di = 0; di < 4; ++di)
        for (int wi = 0; wi < 2; ++wi) {
            const int D = dims[di], VW = widths[wi];
            double ss_chain = 0, ss_lanes = 0, max_chain = 0, max_lanes = 0;
            for (int t = 0; t < PAIRS; ++t) {
                float q[128], k[128], lane[16] = {0}, chain = 0.0f;
                double exact = 0.0, mag = 0.0;
                for (int l = 0; l < D; ++l) {
                    q[l] = (float)normal();
                    k[l] = (float)(838.0 * normal());
                    exact += (double)q[l] * k[l];
                    mag += fabs((double)q[l] * k[l]);
                    chain = fmaf(q[l], k[l], chain);
                }
                for (int l = 0; l < D; l += VW)
                    for (int i = 0; i < VW && l + i < D; ++i) lane[i] = fmaf(q[l + i], k[l + i], lane[i]);
                for (int w = VW / 2; w >= 1; w /= 2)
                    for (int i = 0; i < w; ++i) lane[i] += lane[i + w];
                const double ec = (chain - exact) / mag / 0x1p-24, el = (lane[0] - exact) / mag / 0x1p-24;
                ss_chain += ec * ec, ss_lanes += el * el;
                max_chain = fmax(max_chain, fabs(ec)), max_lanes = fmax(max_lanes, fabs(el));
            }
            printf("D=%3d VW=%2d  RMS: chain %.2f lanes %.2f   max: chain %.2f lanes %.2f\n", D, VW,
                   sqrt(ss_chain / PAIRS), sqrt(ss_lanes / PAIRS), max_chain, max_lanes);
        }
    return 0;
}
