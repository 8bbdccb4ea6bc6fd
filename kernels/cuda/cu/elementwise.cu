// dnnplan fused GPU passes, element-wise passes: ReLU, GELU, dropout, add, format casts, SGD, bias adds.
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
extern "C" __global__ void relu_fwd(const T* x, T* y, unsigned char* keep, long long n) {
    GRID_LOOP(i, n) {
        float v = LD(x, i);
        bool k = v > 0.0f;
        ST(y, i, k ? v : 0.0f);
        keep[i] = k ? 1 : 0;
    }
}
extern "C" __global__ void mask_mul(const T* dy, const unsigned char* keep, T* dx, long long n, float scale) {
    GRID_LOOP(i, n) { ST(dx, i, keep[i] ? LD(dy, i) * scale : 0.0f); }
}
extern "C" __global__ void gelu_fwd(const T* x, T* y, long long n) {
    GRID_LOOP(i, n) {
        float v = LD(x, i);
        float t = tanhf(GELU_C * (v + GELU_A * v * v * v));
        ST(y, i, 0.5f * v * (1.0f + t));
    }
}
extern "C" __global__ void gelu_bwd(const T* dy, const T* x, T* dx, long long n) {
    GRID_LOOP(i, n) {
        float v = LD(x, i);
        float t = tanhf(GELU_C * (v + GELU_A * v * v * v));
        float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        ST(dx, i, LD(dy, i) * d);
    }
}
// the seed moves with the step counter in device memory (0 in eager steps), which a CUDA graph's
// replays advance (step_advance), so each replay draws a new mask
extern "C" __global__ void dropout_fwd(const T* x, T* y, unsigned char* keep, long long n,
                                       const unsigned long long* step, unsigned long long seed,
                                       unsigned int threshold, float scale) {
    unsigned long long s = seed + step[0] * 0xD1B54A32D192ED03ULL;
    GRID_LOOP(i, n) {
        bool k = mix64(s * 0x9E3779B97F4A7C15ULL + (unsigned long long)i) >= threshold;
        ST(y, i, k ? LD(x, i) * scale : 0.0f);
        keep[i] = k ? 1 : 0;
    }
}
extern "C" __global__ void step_advance(unsigned long long* step, long long n) {
    GRID_LOOP(i, n) { step[i] += 1; }
}
extern "C" __global__ void add2(const T* a, const T* b, T* y, long long n) {
    GRID_LOOP(i, n) { ST(y, i, LD(a, i) + LD(b, i)); }
}
extern "C" __global__ void from_f32(const float* a, T* y, long long n) {
    GRID_LOOP(i, n) { ST(y, i, a[i]); }
}
extern "C" __global__ void to_f32(const T* a, float* y, long long n) {
    GRID_LOOP(i, n) { y[i] = LD(a, i); }
}
extern "C" __global__ void sgd_same(T* w, T* v, const T* g, long long n, float lr, float mom) {
    GRID_LOOP(i, n) {
        float m = mom * LD(v, i) + LD(g, i);
        ST(v, i, m);
        ST(w, i, LD(w, i) - lr * m);
    }
}
extern "C" __global__ void sgd_mixed(T* w, float* master, float* v, const T* g, long long n, float lr, float mom) {
    GRID_LOOP(i, n) {
        float m = mom * v[i] + LD(g, i);
        v[i] = m;
        float nw = master[i] - lr * m;
        master[i] = nw;
        ST(w, i, nw);
    }
}
extern "C" __global__ void bias_rows(T* y, const T* b, long long n, long long f) {
    GRID_LOOP(i, n) { ST(y, i, LD(y, i) + LD(b, i % f)); }
}
extern "C" __global__ void bias_nchw(T* y, const T* b, long long n, long long inner, int c) {
    GRID_LOOP(i, n) { ST(y, i, LD(y, i) + LD(b, (i / inner) % c)); }
}
// Token embedding: y[t, j] = tokens[ids[t] - lo, j] (0 outside the shard's rows) + positions[t mod s, j].
extern "C" __global__ void embed_fwd(const long long* ids, const T* tokens, const T* pos, T* y, long long n,
                                     int s, int d, long long lo, long long rows, int has_pos) {
    GRID_LOOP(i, n) {
        long long t = i / d;
        int j = (int)(i - t * d);
        long long r = ids[t] - lo;
        float v = (r >= 0 && r < rows) ? LD(tokens, r * d + j) : 0.0f;
        if (has_pos) v += LD(pos, (t % s) * d + j);
        ST(y, i, v);
    }
}
// Its weight gradient: dy added into float32 rows (dtok zeroed first).
extern "C" __global__ void embed_bwd(const long long* ids, const T* dy, float* dtok, long long n, int d,
                                     long long lo, long long rows) {
    GRID_LOOP(i, n) {
        long long t = i / d;
        long long r = ids[t] - lo;
        if (r >= 0 && r < rows) atomicAdd(dtok + r * d + (i - t * d), LD(dy, i));
    }
}
// Busy-waits `cycles` SM clock cycles on one thread: queued before a timed call, it keeps the device
// busy while the host enqueues the call, so the call's events time the device, not the launches.
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
