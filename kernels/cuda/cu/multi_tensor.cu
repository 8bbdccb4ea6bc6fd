// dnnplan fused GPU passes, one launch over many tensors: SGD with momentum on every weight of a step.
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
// meta (int64) = [weights (n) | momenta (n) | masters (n) | gradients (n) | sizes (n) | first block (n + 1)],
// device pointers as integers: block b updates `chunk` elements of the tensor whose first block is the
// last one <= b (a tensor of size 0 owns no block). The arithmetic is sgd_same's, or sgd_mixed's when
// `mixed` (a float32 master and momentum beside each 16-bit weight).
extern "C" __global__ void sgd_many(const long long* meta, int n, int chunk, float lr, float mom, int mixed) {
    const long long* first = meta + 5LL * n;
    long long b = blockIdx.x;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (first[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    long long size = meta[4LL * n + lo];
    long long start = (b - first[lo]) * (long long)chunk;
    long long end = start + chunk < size ? start + chunk : size;
    T* w = (T*)meta[lo];
    const T* g = (const T*)meta[3LL * n + lo];
    if (mixed) {
        float* v = (float*)meta[n + lo];
        float* master = (float*)meta[2LL * n + lo];
        for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
            float m = mom * v[i] + LD(g, i);
            v[i] = m;
            float nw = master[i] - lr * m;
            master[i] = nw;
            ST(w, i, nw);
        }
        return;
    }
    T* v = (T*)meta[n + lo];
    for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        float m = mom * LD(v, i) + LD(g, i);
        ST(v, i, m);
        ST(w, i, LD(w, i) - lr * m);
    }
}
