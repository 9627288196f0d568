// launchrate: launch throughput. Arguments: N launches (default 100000)
// and ROUNDS (default 3). Each round launches the empty kernel (cudaprog.h)
// N times on the default stream, grid 1 block 1, then waits with
// cuCtxSynchronize; the best round prints "time: launches/s X" (a timing
// line, not compared between runs). The run ends with "launchrate: ok",
// or status 1 and the CUDA error's name. docs/cuda.md, "Programs".
//
// Build: gcc -O2 -I<dir of cuda.h> -o launchrate launchrate.c -lcuda
#include "cudaprog.h"

int main(int argc, char **argv) {
	prog = "launchrate";
	int n = argc > 1 ? atoi(argv[1]) : 100000;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	if (n <= 0 || rounds <= 0) {
		printf("launchrate: FAIL usage: launchrate [N [ROUNDS]], both > 0\n");
		return 2;
	}
	CUmodule mod = setup();
	CUfunction fn;
	CHECK(cuModuleGetFunction(&fn, mod, "empty"));
	// One launch first: a driver that loads the kernel lazily does it here.
	CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
	CHECK(cuCtxSynchronize());
	printf("launchrate: %d launches, %d rounds\n", n, rounds);
	double best = 0;
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		for (int i = 0; i < n; i++) {
			CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
		}
		CHECK(cuCtxSynchronize());
		double rate = n / (now() - t0);
		if (rate > best) {
			best = rate;
		}
	}
	printf("time: launches/s %.0f\n", best);
	CHECK(cuModuleUnload(mod));
	printf("launchrate: ok\n");
	return 0;
}
