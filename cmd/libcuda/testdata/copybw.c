// copybw: host↔device copy bandwidth. Arguments: MIB per copy (default
// 256) and ROUNDS (default 3). For pageable host memory (malloc) and then
// pinned (cuMemAllocHost; where it fails the program says so and skips
// those rows), it copies MIB MiB host→device (cuMemcpyHtoD) and back
// (cuMemcpyDtoH) ROUNDS times and prints the best of each as
// "time: HtoD pageable X GB/s" (timing lines, not compared between runs).
// Every copy back must equal what went in. The run ends with
// "copybw: ok", or "copybw: FAIL ..." and status 1 (any CUDA error too,
// named). No kernels. docs/cuda.md, "Programs".
//
// Build: gcc -O2 -I<dir of cuda.h> -o copybw copybw.c -lcuda
#include "cudaprog.h"

static int failed;

// measure copies size bytes from src to the device and back into dst,
// rounds times, and prints the best rate of each direction.
static void measure(const char *kind, CUdeviceptr dev, unsigned char *src, unsigned char *dst, size_t size, int rounds) {
	double up = 0, down = 0;
	for (int r = 0; r < rounds; r++) {
		memset(src, 0, 4096); // each round's first page differs
		src[0] = (unsigned char)r;
		double t0 = now();
		CHECK(cuMemcpyHtoD(dev, src, size));
		double t1 = now();
		CHECK(cuMemcpyDtoH(dst, dev, size));
		double t2 = now();
		if (memcmp(src, dst, size) != 0) {
			printf("copybw: FAIL %s round %d: the copy back differs\n", kind, r);
			failed = 1;
		}
		if (size / (t1 - t0) > up) {
			up = size / (t1 - t0);
		}
		if (size / (t2 - t1) > down) {
			down = size / (t2 - t1);
		}
	}
	printf("time: HtoD %s %.2f GB/s\n", kind, up / 1e9);
	printf("time: DtoH %s %.2f GB/s\n", kind, down / 1e9);
}

int main(int argc, char **argv) {
	prog = "copybw";
	int mib = argc > 1 ? atoi(argv[1]) : 256;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	if (mib <= 0 || mib > 65536 || rounds <= 0) {
		printf("copybw: FAIL usage: copybw [MIB [ROUNDS]], MIB 1..65536, ROUNDS > 0\n");
		return 2;
	}
	size_t size = (size_t)mib << 20;
	CUdevice d;
	CUcontext ctx;
	CUdeviceptr dev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&d, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemAlloc(&dev, size));
	printf("copybw: %d MiB, %d rounds\n", mib, rounds);

	unsigned char *src = malloc(size), *dst = malloc(size);
	if (!src || !dst) {
		printf("copybw: FAIL out of host memory\n");
		return 1;
	}
	for (size_t i = 0; i < size; i++) {
		src[i] = (unsigned char)(i * 131 + (i >> 20));
	}
	memset(dst, 0, size); // fault the pages in before timing
	measure("pageable", dev, src, dst, size, rounds);

	void *psrc = 0, *pdst = 0;
	CUresult r = cuMemAllocHost(&psrc, size);
	if (r == CUDA_SUCCESS) {
		r = cuMemAllocHost(&pdst, size);
	}
	if (r != CUDA_SUCCESS) {
		printf("copybw: cuMemAllocHost: %s, pinned rows skipped\n", cu_name(r));
	} else {
		memcpy(psrc, src, size);
		memset(pdst, 0, size);
		measure("pinned", dev, psrc, pdst, size, rounds);
	}
	if (psrc) {
		CHECK(cuMemFreeHost(psrc));
	}
	if (pdst) {
		CHECK(cuMemFreeHost(pdst));
	}
	CHECK(cuMemFree(dev));
	printf("copybw: %s\n", failed ? "FAIL" : "ok");
	return failed;
}
