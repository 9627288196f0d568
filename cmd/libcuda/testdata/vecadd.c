// vecadd: c = a + b on the GPU (the vecAdd kernel, cudaprog.h), checked
// against the same sum computed on the CPU. Arguments: N (default 1<<20
// floats), ITERS (default 1) and PACE, milliseconds slept after each
// iteration (default 0), so a migration can land mid-run. Each iteration
// fills a and b from a seed of its own, copies them to the device,
// launches vecAdd (grid ceil(N/256), block 256), copies c back and prints
// "vecadd: iter I digest H" (FNV-1a over c's bytes, hex); the run ends
// with "vecadd: ok", or "vecadd: FAIL ..." and status 1 (any CUDA error
// too, named). docs/cuda.md, "Programs".
//
// Build: gcc -O2 -I<dir of cuda.h> -o vecadd vecadd.c -lcuda
#include "cudaprog.h"

int main(int argc, char **argv) {
	prog = "vecadd";
	int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
	int iters = argc > 2 ? atoi(argv[2]) : 1;
	int pace = argc > 3 ? atoi(argv[3]) : 0;
	if (n <= 0 || iters <= 0) {
		printf("vecadd: FAIL usage: vecadd [N [ITERS [PACE_MS]]], N and ITERS > 0\n");
		return 2;
	}
	size_t bytes = (size_t)n * sizeof(float);
	float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *want = malloc(bytes);
	if (!a || !b || !c || !want) {
		printf("vecadd: FAIL out of host memory\n");
		return 1;
	}
	CUmodule mod = setup();
	CUfunction fn;
	CUdeviceptr da, db, dc;
	CHECK(cuModuleGetFunction(&fn, mod, "vecAdd"));
	CHECK(cuMemAlloc(&da, bytes));
	CHECK(cuMemAlloc(&db, bytes));
	CHECK(cuMemAlloc(&dc, bytes));
	printf("vecadd: n %d\n", n);
	int failed = 0;
	for (int it = 0; it < iters; it++) {
		fill_floats(a, n, 2 * it + 1);
		fill_floats(b, n, 2 * it + 2);
		for (int i = 0; i < n; i++) {
			want[i] = a[i] + b[i];
		}
		CHECK(cuMemcpyHtoD(da, a, bytes));
		CHECK(cuMemcpyHtoD(db, b, bytes));
		CHECK(cuMemsetD32(dc, 0xffffffffu, n)); // a NaN pattern: an element never written shows
		void *params[] = {&da, &db, &dc, &n};
		CHECK(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, params, 0));
		CHECK(cuMemcpyDtoH(c, dc, bytes));
		int bad = 0;
		for (int i = 0; i < n; i++) {
			if (memcmp(&c[i], &want[i], sizeof(float)) != 0) {
				if (bad++ == 0) {
					printf("vecadd: FAIL iter %d c[%d] = %a, want %a\n", it, i, c[i], want[i]);
				}
			}
		}
		if (bad) {
			printf("vecadd: FAIL iter %d: %d of %d elements differ\n", it, bad, n);
			failed = 1;
		}
		printf("vecadd: iter %d digest %016llx\n", it, (unsigned long long)fnv(fnv_init, c, bytes));
		fflush(stdout);
		sleep_ms(pace);
	}
	CHECK(cuMemFree(da));
	CHECK(cuMemFree(db));
	CHECK(cuMemFree(dc));
	CHECK(cuModuleUnload(mod));
	printf("vecadd: %s\n", failed ? "FAIL" : "ok");
	return failed;
}
