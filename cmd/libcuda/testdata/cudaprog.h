// cudaprog.h: what the evidence programs (vecadd.c, matmul.c, streams.c,
// launchrate.c, copybw.c; docs/cuda.md, "Programs") share: the PTX module
// of their kernels, error checking that exits nonzero naming the CUresult
// (cuGetErrorName), the FNV-1a digest and a monotonic clock. Written only
// against NVIDIA's cuda.h (driver API), so the same binaries run on NVIDIA's
// libcuda.so.1 and on gmig's.
#ifndef CUDAPROG_H
#define CUDAPROG_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The kernels of the ABI 1.3 contract (docs/device-abi.md, LAUNCH_GRID), by
// entry name, hand-written PTX: mul.rn.f32 and add.rn.f32 only (never fma),
// so that a CPU computing in float, one rounding per operation, gets the
// same bits, and so does the CUDA model that plays them in Go.
//   vecAdd(a, b, c, n):      c[i] = a[i] + b[i] for i < n
//   scaleAdd(x, y, a, n):    y[i] = a*x[i] + y[i] for i < n (mul, then add)
//   matMulTiled(A, B, C, n): C = A×B, n×n row-major, 16×16 tiles in shared
//                            memory, block (16,16), grid (n/16,n/16);
//                            acc = acc + As[ty][k]*Bs[k][tx], k = 0..15 per tile
//   empty():                 nothing
static const char kernels_ptx[] =
	".version 7.0\n"
	".target sm_52\n"
	".address_size 64\n"
	"\n"
	".visible .entry vecAdd(\n"
	"\t.param .u64 vecAdd_param_0,\n"
	"\t.param .u64 vecAdd_param_1,\n"
	"\t.param .u64 vecAdd_param_2,\n"
	"\t.param .u32 vecAdd_param_3\n"
	")\n"
	"{\n"
	"\t.reg .pred %p<2>;\n"
	"\t.reg .f32 %f<4>;\n"
	"\t.reg .b32 %r<6>;\n"
	"\t.reg .b64 %rd<11>;\n"
	"\n"
	"\tld.param.u64 %rd1, [vecAdd_param_0];\n"
	"\tld.param.u64 %rd2, [vecAdd_param_1];\n"
	"\tld.param.u64 %rd3, [vecAdd_param_2];\n"
	"\tld.param.u32 %r2, [vecAdd_param_3];\n"
	"\tmov.u32 %r3, %ctaid.x;\n"
	"\tmov.u32 %r4, %ntid.x;\n"
	"\tmov.u32 %r5, %tid.x;\n"
	"\tmad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"\tsetp.ge.s32 %p1, %r1, %r2;\n"
	"\t@%p1 bra vecAdd_done;\n"
	"\tcvta.to.global.u64 %rd4, %rd1;\n"
	"\tmul.wide.s32 %rd5, %r1, 4;\n"
	"\tadd.s64 %rd6, %rd4, %rd5;\n"
	"\tld.global.f32 %f1, [%rd6];\n"
	"\tcvta.to.global.u64 %rd7, %rd2;\n"
	"\tadd.s64 %rd8, %rd7, %rd5;\n"
	"\tld.global.f32 %f2, [%rd8];\n"
	"\tadd.rn.f32 %f3, %f1, %f2;\n"
	"\tcvta.to.global.u64 %rd9, %rd3;\n"
	"\tadd.s64 %rd10, %rd9, %rd5;\n"
	"\tst.global.f32 [%rd10], %f3;\n"
	"vecAdd_done:\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry scaleAdd(\n"
	"\t.param .u64 scaleAdd_param_0,\n"
	"\t.param .u64 scaleAdd_param_1,\n"
	"\t.param .f32 scaleAdd_param_2,\n"
	"\t.param .u32 scaleAdd_param_3\n"
	")\n"
	"{\n"
	"\t.reg .pred %p<2>;\n"
	"\t.reg .f32 %f<6>;\n"
	"\t.reg .b32 %r<6>;\n"
	"\t.reg .b64 %rd<9>;\n"
	"\n"
	"\tld.param.u64 %rd1, [scaleAdd_param_0];\n"
	"\tld.param.u64 %rd2, [scaleAdd_param_1];\n"
	"\tld.param.f32 %f1, [scaleAdd_param_2];\n"
	"\tld.param.u32 %r2, [scaleAdd_param_3];\n"
	"\tmov.u32 %r3, %ctaid.x;\n"
	"\tmov.u32 %r4, %ntid.x;\n"
	"\tmov.u32 %r5, %tid.x;\n"
	"\tmad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"\tsetp.ge.s32 %p1, %r1, %r2;\n"
	"\t@%p1 bra scaleAdd_done;\n"
	"\tcvta.to.global.u64 %rd3, %rd1;\n"
	"\tmul.wide.s32 %rd4, %r1, 4;\n"
	"\tadd.s64 %rd5, %rd3, %rd4;\n"
	"\tld.global.f32 %f2, [%rd5];\n"
	"\tcvta.to.global.u64 %rd6, %rd2;\n"
	"\tadd.s64 %rd7, %rd6, %rd4;\n"
	"\tld.global.f32 %f3, [%rd7];\n"
	"\tmul.rn.f32 %f4, %f1, %f2;\n"
	"\tadd.rn.f32 %f5, %f4, %f3;\n"
	"\tst.global.f32 [%rd7], %f5;\n"
	"scaleAdd_done:\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry matMulTiled(\n"
	"\t.param .u64 matMulTiled_param_0,\n"
	"\t.param .u64 matMulTiled_param_1,\n"
	"\t.param .u64 matMulTiled_param_2,\n"
	"\t.param .u32 matMulTiled_param_3\n"
	")\n"
	"{\n"
	"\t.reg .pred %p<3>;\n"
	"\t.reg .f32 %f<5>;\n"
	"\t.reg .b32 %r<26>;\n"
	"\t.reg .b64 %rd<10>;\n"
	"\t.shared .align 4 .b8 matMulTiled_As[1024];\n"
	"\t.shared .align 4 .b8 matMulTiled_Bs[1024];\n"
	"\n"
	"\tld.param.u64 %rd1, [matMulTiled_param_0];\n"
	"\tld.param.u64 %rd2, [matMulTiled_param_1];\n"
	"\tld.param.u64 %rd3, [matMulTiled_param_2];\n"
	"\tld.param.u32 %r1, [matMulTiled_param_3];\n"
	"\tcvta.to.global.u64 %rd1, %rd1;\n"
	"\tcvta.to.global.u64 %rd2, %rd2;\n"
	"\tcvta.to.global.u64 %rd3, %rd3;\n"
	"\tmov.u32 %r2, %tid.x;\n"
	"\tmov.u32 %r3, %tid.y;\n"
	"\tmov.u32 %r4, %ctaid.x;\n"
	"\tmov.u32 %r5, %ctaid.y;\n"
	"\tshl.b32 %r6, %r5, 4;\n"
	"\tadd.s32 %r6, %r6, %r3;\n"
	"\tshl.b32 %r7, %r4, 4;\n"
	"\tadd.s32 %r7, %r7, %r2;\n"
	"\tshr.u32 %r8, %r1, 4;\n"
	"\tmov.u32 %r9, matMulTiled_As;\n"
	"\tmov.u32 %r10, matMulTiled_Bs;\n"
	"\tshl.b32 %r11, %r3, 4;\n"
	"\tadd.s32 %r11, %r11, %r2;\n"
	"\tshl.b32 %r11, %r11, 2;\n"
	"\tadd.s32 %r12, %r9, %r11;\n"
	"\tadd.s32 %r13, %r10, %r11;\n"
	"\tshl.b32 %r14, %r3, 6;\n"
	"\tadd.s32 %r14, %r9, %r14;\n"
	"\tshl.b32 %r15, %r2, 2;\n"
	"\tadd.s32 %r15, %r10, %r15;\n"
	"\tmov.f32 %f1, 0f00000000;\n"
	"\tmov.u32 %r16, 0;\n"
	"\tsetp.eq.u32 %p1, %r8, 0;\n"
	"\t@%p1 bra matMulTiled_store;\n"
	"matMulTiled_tile:\n"
	"\tshl.b32 %r17, %r16, 4;\n"
	"\tmad.lo.s32 %r18, %r6, %r1, %r17;\n"
	"\tadd.s32 %r18, %r18, %r2;\n"
	"\tmul.wide.u32 %rd4, %r18, 4;\n"
	"\tadd.s64 %rd5, %rd1, %rd4;\n"
	"\tld.global.f32 %f2, [%rd5];\n"
	"\tst.shared.f32 [%r12], %f2;\n"
	"\tadd.s32 %r19, %r17, %r3;\n"
	"\tmad.lo.s32 %r19, %r19, %r1, %r7;\n"
	"\tmul.wide.u32 %rd6, %r19, 4;\n"
	"\tadd.s64 %rd7, %rd2, %rd6;\n"
	"\tld.global.f32 %f3, [%rd7];\n"
	"\tst.shared.f32 [%r13], %f3;\n"
	"\tbar.sync 0;\n"
	"\tmov.u32 %r20, 0;\n"
	"matMulTiled_k:\n"
	"\tshl.b32 %r21, %r20, 2;\n"
	"\tadd.s32 %r22, %r14, %r21;\n"
	"\tld.shared.f32 %f2, [%r22];\n"
	"\tshl.b32 %r23, %r20, 6;\n"
	"\tadd.s32 %r24, %r15, %r23;\n"
	"\tld.shared.f32 %f3, [%r24];\n"
	"\tmul.rn.f32 %f4, %f2, %f3;\n"
	"\tadd.rn.f32 %f1, %f1, %f4;\n"
	"\tadd.s32 %r20, %r20, 1;\n"
	"\tsetp.lt.u32 %p2, %r20, 16;\n"
	"\t@%p2 bra matMulTiled_k;\n"
	"\tbar.sync 0;\n"
	"\tadd.s32 %r16, %r16, 1;\n"
	"\tsetp.lt.u32 %p1, %r16, %r8;\n"
	"\t@%p1 bra matMulTiled_tile;\n"
	"matMulTiled_store:\n"
	"\tmad.lo.s32 %r25, %r6, %r1, %r7;\n"
	"\tmul.wide.u32 %rd8, %r25, 4;\n"
	"\tadd.s64 %rd9, %rd3, %rd8;\n"
	"\tst.global.f32 [%rd9], %f1;\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry empty()\n"
	"{\n"
	"\tret;\n"
	"}\n";

// prog is the program's name, the first word of each line it prints
// (set by main before anything else).
static const char *prog = "cuda";

static inline const char *cu_name(CUresult r) {
	const char *s = 0;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) {
		return "CUDA_ERROR_UNKNOWN";
	}
	return s;
}

// CHECK runs a driver API call; any result but CUDA_SUCCESS ends the
// program with status 1, printing the call and the result's name.
#define CHECK(call)                                                               \
	do {                                                                      \
		CUresult r_ = (call);                                             \
		if (r_ != CUDA_SUCCESS) {                                         \
			printf("%s: FAIL %s: %s\n", prog, #call, cu_name(r_));    \
			fflush(stdout);                                           \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

// FNV-1a, 64 bits (offset basis and prime from the FNV specification),
// continuing from h (fnv_init to start).
static const uint64_t fnv_init = 14695981039346656037ull; // the offset basis

static inline uint64_t fnv(uint64_t h, const void *p, size_t n) {
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h = (h ^ b[i]) * 1099511628211ull;
	}
	return h;
}

// seconds on the monotonic clock.
static inline double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms) {
	if (ms > 0) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		nanosleep(&ts, 0);
	}
}

// fill_floats fills p[0..n) with values in [-8, 8) from a 32-bit LCG seeded
// with seed (Numerical Recipes' constants): multiples of 2^-20, so sums and
// products exercise rounding.
static inline void fill_floats(float *p, size_t n, uint32_t seed) {
	uint32_t s = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		p[i] = (float)(int32_t)(s >> 8) * (1.0f / 1048576.0f) - 8.0f;
	}
}

// setup initialises the driver, makes device 0's primary context current
// and loads the kernels' module.
static inline CUmodule setup(void) {
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&mod, kernels_ptx));
	return mod;
}

#endif
