// gmig's NVIDIA back-end kernels (docs/nvidia.md). Built on a machine with
// the CUDA toolkit by build.sh into kernels.ptx, which is committed and
// embedded in package engine/nvidia: no gmig build needs nvcc.
//
// Every float kernel follows docs/device-abi.md §7 bit for bit: binary32,
// round-to-nearest-even after every operation (__fmul_rn/__fadd_rn, which
// nvcc never contracts into an FMA), denormals kept (no -ftz), and every
// computed NaN stored as the canonical 0x7fffffff, exactly as the software
// back end (engine/cpuref: Saxpy, StencilRows, RenderPixels).
//
// Kernels take 64-bit element counts and grid-stride loops, so any grid
// size is correct; the host picks one that fills the device.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

// piece is one contiguous copy or fill: len bytes from src to dst (fill:
// src holds the pattern's phase, the byte of the pattern dst[0] gets).
// Mirrors engine's nvPiece (24 bytes).
struct piece {
    u64 src;
    u64 dst;
    u64 len;
};

// gmig_copy_pieces copies pieces[0..n) (one block per piece at a time,
// 16-byte words when both ends allow, else 4-byte words, else bytes). The
// pieces of one launch must not overlap each other; with a grid of one
// block they are copied in order, each finished before the next starts, so
// a later piece may overwrite an earlier one (graphics-address order).
extern "C" __global__ void gmig_copy_pieces(const piece* __restrict__ pieces, u32 n)
{
    for (u32 i = blockIdx.x; i < n; i += gridDim.x) {
        const piece p = pieces[i];
        const u64 len = p.len;
        if (((p.src | p.dst) & 15) == 0) {
            const uint4* s = (const uint4*)p.src;
            uint4* d = (uint4*)p.dst;
            const u64 nv = len >> 4;
            for (u64 j = threadIdx.x; j < nv; j += blockDim.x)
                d[j] = s[j];
            const u8* sb = (const u8*)p.src;
            u8* db = (u8*)p.dst;
            for (u64 j = (nv << 4) + threadIdx.x; j < len; j += blockDim.x)
                db[j] = sb[j];
        } else if (((p.src | p.dst) & 3) == 0) {
            const u32* s = (const u32*)p.src;
            u32* d = (u32*)p.dst;
            const u64 nw = len >> 2;
            for (u64 j = threadIdx.x; j < nw; j += blockDim.x)
                d[j] = s[j];
            const u8* sb = (const u8*)p.src;
            u8* db = (u8*)p.dst;
            for (u64 j = (nw << 2) + threadIdx.x; j < len; j += blockDim.x)
                db[j] = sb[j];
        } else {
            const u8* s = (const u8*)p.src;
            u8* d = (u8*)p.dst;
            for (u64 j = threadIdx.x; j < len; j += blockDim.x)
                d[j] = s[j];
        }
        __syncthreads();
    }
}

// gmig_fill_pieces writes the little-endian 32-bit pattern repeatedly over
// each piece, piece byte j getting pattern byte (phase + j) mod 4 where
// phase = p.src & 3 (docs/device-abi.md §6.2).
extern "C" __global__ void gmig_fill_pieces(const piece* __restrict__ pieces, u32 n, u32 pattern)
{
    for (u32 i = blockIdx.x; i < n; i += gridDim.x) {
        const piece p = pieces[i];
        const u32 phase = (u32)(p.src & 3);
        // rot: the pattern as seen from a 4-byte-aligned offset that is
        // phase bytes into it.
        const u32 rot = phase == 0 ? pattern : (pattern >> (8 * phase)) | (pattern << (32 - 8 * phase));
        if ((p.dst & 15) == 0) {
            uint4* d = (uint4*)p.dst;
            const uint4 v = make_uint4(rot, rot, rot, rot);
            const u64 nv = p.len >> 4;
            for (u64 j = threadIdx.x; j < nv; j += blockDim.x)
                d[j] = v;
            u8* db = (u8*)p.dst;
            for (u64 j = (nv << 4) + threadIdx.x; j < p.len; j += blockDim.x)
                db[j] = (u8)(pattern >> (8 * ((phase + j) & 3)));
        } else {
            u8* d = (u8*)p.dst;
            for (u64 j = threadIdx.x; j < p.len; j += blockDim.x)
                d[j] = (u8)(pattern >> (8 * ((phase + j) & 3)));
        }
        __syncthreads();
    }
}

// canon replaces a computed NaN by the canonical one (docs/device-abi.md §7).
__device__ __forceinline__ float canon(float v)
{
    return v != v ? __int_as_float(0x7fffffff) : v;
}

// gmig_saxpy is §7.1: y[i] = (a * x[i]) + y[i], each operation rounded.
extern "C" __global__ void gmig_saxpy(u64 n, float a, const float* __restrict__ x, float* __restrict__ y)
{
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = canon(__fadd_rn(__fmul_rn(a, x[i]), y[i]));
}

// gmig_stencil is §7.2: borders copied, interior
// ((((c + n) + s) + w) + e) * 0.2f, each operation rounded.
extern "C" __global__ void gmig_stencil(u32 w, u32 h, const float* __restrict__ in, float* __restrict__ out)
{
    const float fifth = __int_as_float(0x3e4ccccd); // 0.2f
    const u64 total = (u64)w * h;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const u32 y = (u32)(i / w);
        const u32 x = (u32)(i - (u64)y * w);
        const float c = in[i];
        if (y == 0 || y == h - 1 || x == 0 || x == w - 1) {
            out[i] = c;
            continue;
        }
        float v = __fadd_rn(c, in[i - w]);
        v = __fadd_rn(v, in[i + w]);
        v = __fadd_rn(v, in[i - 1]);
        v = __fadd_rn(v, in[i + 1]);
        out[i] = canon(__fmul_rn(v, fifth));
    }
}

// gmig_render is §7.3 for frame t (mod 2^32): pixel (x, y) of the w x h
// RGBA8 framebuffer is r | g<<8 | b<<16 | 255<<24 with r = x + t,
// g = y + 2t, b = (x xor y) + 3t, all mod 256.
extern "C" __global__ void gmig_render(u32 w, u32 h, u32 t, u32* __restrict__ fb)
{
    const u64 total = (u64)w * h;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const u32 y = (u32)(i / w);
        const u32 x = (u32)(i - (u64)y * w);
        const u32 r = (x + t) & 0xff;
        const u32 g = (y + 2 * t) & 0xff;
        const u32 b = ((x ^ y) + 3 * t) & 0xff;
        fb[i] = r | g << 8 | b << 16 | 0xffu << 24;
    }
}

// xxHash64 (Yann Collet, BSD-2; the specification of
// github.com/Cyan4973/xxHash doc/xxhash_spec.md), seed 0, of whole 4096-byte
// pages: bit-identical to github.com/cespare/xxhash/v2 Sum64, which the
// dirty tracker and the migration stream use.
#define XXH_P1 11400714785074694791ULL
#define XXH_P2 14029467366897019727ULL
#define XXH_P3 1609587929392839161ULL
#define XXH_P4 9650029242287828579ULL

__device__ __forceinline__ u64 xxh_rotl(u64 x, int r) { return (x << r) | (x >> (64 - r)); }

__device__ __forceinline__ u64 xxh_round(u64 acc, u64 in)
{
    acc += in * XXH_P2;
    acc = xxh_rotl(acc, 31);
    return acc * XXH_P1;
}

__device__ __forceinline__ u64 xxh_merge(u64 acc, u64 val)
{
    acc ^= xxh_round(0, val);
    return acc * XXH_P1 + XXH_P4;
}

#define PAGE_WORDS 512 // 4096 / 8
#define STRIPES 128    // 4096 / 32
#define BATCH 16

// gmig_xxh64_pages hashes n pages: page k is the 4096 bytes at
// base + 4096 * (pages ? pages[k] : k), its hash goes to out[k].
//
// Four consecutive threads hash one page, thread j running xxHash64's
// accumulator j over word j of every 32-byte stripe: the four read the
// stripe's 32 contiguous bytes together, so a warp's loads are 8 whole
// 32-byte sectors. Loads are issued BATCH stripes ahead of the rounds.
// The four accumulators meet in the group's first thread (shuffles of
// width 4) for xxHash64's convergence, length and avalanche steps. The
// block size must be a multiple of 32.
extern "C" __global__ void gmig_xxh64_pages(const u64* __restrict__ base, const u32* __restrict__ pages,
                                            u32 n, u64* __restrict__ out)
{
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 page = tid >> 2;
    const u32 lane = (u32)(tid & 3);
    const bool active = page < n;
    u64 acc = 0;
    if (active) {
        const u64 pg = pages ? (u64)pages[page] : page;
        const u64* p = base + pg * PAGE_WORDS + lane;
        acc = lane == 0 ? XXH_P1 + XXH_P2 : lane == 1 ? XXH_P2 : lane == 2 ? 0 : 0 - XXH_P1;
        for (int s = 0; s < STRIPES; s += BATCH) {
            u64 w[BATCH];
#pragma unroll
            for (int j = 0; j < BATCH; j++)
                w[j] = p[(s + j) * 4];
#pragma unroll
            for (int j = 0; j < BATCH; j++)
                acc = xxh_round(acc, w[j]);
        }
    }
    const u64 v1 = __shfl_sync(0xffffffffu, acc, 0, 4);
    const u64 v2 = __shfl_sync(0xffffffffu, acc, 1, 4);
    const u64 v3 = __shfl_sync(0xffffffffu, acc, 2, 4);
    const u64 v4 = __shfl_sync(0xffffffffu, acc, 3, 4);
    if (!active || lane != 0)
        return;
    u64 h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
    h += 4096;
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    out[page] = h;
}

// gmig_diff_hashes appends to list the index of every k < n with
// a[k] != b[k], counting them in *count (order unspecified).
extern "C" __global__ void gmig_diff_hashes(const u64* __restrict__ a, const u64* __restrict__ b, u32 n,
                                            u32* __restrict__ list, u32* __restrict__ count)
{
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (a[k] != b[k])
            list[atomicAdd(count, 1u)] = (u32)k;
}
