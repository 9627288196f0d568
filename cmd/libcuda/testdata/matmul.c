// matmul: C = A×B for n×n float matrices on the GPU (the matMulTiled
// kernel, cudaprog.h: 16×16 tiles in shared memory), checked against the
// CPU computing each element the same way — acc starts at 0.0f and adds
// A[row][k]*B[k][col] for k = 0..n-1 in order, a float multiply then a
// float add (no fused multiply-add) — so the bits must agree. Arguments: N
// (default 512, a multiple of 16), ITERS (default 1) and PACE,
// milliseconds slept after each iteration (default 0). Each iteration
// prints "matmul: iter I digest H" (FNV-1a over C's bytes, hex); the run
// ends with "matmul: ok", or "matmul: FAIL ..." and status 1 (any CUDA
// error too, named). docs/cuda.md, "Programs".
//
// Build: gcc -O2 -I<dir of cuda.h> -o matmul matmul.c -lcuda
#include "cudaprog.h"

#if defined(__GNUC__) && !defined(__clang__)
// GCC would fuse the product and the sum where the target has FMA.
#pragma GCC optimize("fp-contract=off")
#endif

enum { TILE = 16 }; // the kernel's tile and block edge

static void reference(const float *A, const float *B, float *C, int n) {
	for (int row = 0; row < n; row++) {
		for (int col = 0; col < n; col++) {
			float acc = 0.0f;
			for (int k = 0; k < n; k++) {
				float p = A[(size_t)row * n + k] * B[(size_t)k * n + col];
				acc = acc + p;
			}
			C[(size_t)row * n + col] = acc;
		}
	}
}

int main(int argc, char **argv) {
	prog = "matmul";
	int n = argc > 1 ? atoi(argv[1]) : 512;
	int iters = argc > 2 ? atoi(argv[2]) : 1;
	int pace = argc > 3 ? atoi(argv[3]) : 0;
	if (n <= 0 || n % TILE != 0 || n > 16384 || iters <= 0) {
		printf("matmul: FAIL usage: matmul [N [ITERS [PACE_MS]]], N a multiple of 16 up to 16384, ITERS > 0\n");
		return 2;
	}
	size_t elems = (size_t)n * n, bytes = elems * sizeof(float);
	float *A = malloc(bytes), *B = malloc(bytes), *C = malloc(bytes), *want = malloc(bytes);
	if (!A || !B || !C || !want) {
		printf("matmul: FAIL out of host memory\n");
		return 1;
	}
	CUmodule mod = setup();
	CUfunction fn;
	CUdeviceptr dA, dB, dC;
	CHECK(cuModuleGetFunction(&fn, mod, "matMulTiled"));
	CHECK(cuMemAlloc(&dA, bytes));
	CHECK(cuMemAlloc(&dB, bytes));
	CHECK(cuMemAlloc(&dC, bytes));
	printf("matmul: n %d\n", n);
	int failed = 0;
	for (int it = 0; it < iters; it++) {
		fill_floats(A, elems, 2 * it + 101);
		fill_floats(B, elems, 2 * it + 102);
		reference(A, B, want, n);
		CHECK(cuMemcpyHtoD(dA, A, bytes));
		CHECK(cuMemcpyHtoD(dB, B, bytes));
		CHECK(cuMemsetD32(dC, 0xffffffffu, elems));
		void *params[] = {&dA, &dB, &dC, &n};
		CHECK(cuLaunchKernel(fn, n / TILE, n / TILE, 1, TILE, TILE, 1, 0, 0, params, 0));
		CHECK(cuCtxSynchronize());
		CHECK(cuMemcpyDtoH(C, dC, bytes));
		size_t bad = 0;
		for (size_t i = 0; i < elems; i++) {
			if (memcmp(&C[i], &want[i], sizeof(float)) != 0) {
				if (bad++ == 0) {
					printf("matmul: FAIL iter %d C[%zu][%zu] = %a, want %a\n", it, i / n, i % n, C[i], want[i]);
				}
			}
		}
		if (bad) {
			printf("matmul: FAIL iter %d: %zu of %zu elements differ\n", it, bad, elems);
			failed = 1;
		}
		printf("matmul: iter %d digest %016llx\n", it, (unsigned long long)fnv(fnv_init, C, bytes));
		fflush(stdout);
		sleep_ms(pace);
	}
	CHECK(cuMemFree(dA));
	CHECK(cuMemFree(dB));
	CHECK(cuMemFree(dC));
	CHECK(cuModuleUnload(mod));
	printf("matmul: %s\n", failed ? "FAIL" : "ok");
	return failed;
}
