// probe: a CUDA driver API program written against NVIDIA's cuda.h, run in
// the guest through gmig's libcuda.so.1 (docs/cuda.md). It queries the
// device, then for ITERS iterations (argv[1], default 40) fills two 1 MiB
// buffers from the host, sets parts of them with memsets, copies between
// them on a stream between two events, reads them back and prints a
// checksum per iteration, pausing PACE ms (argv[2], default 0) after each
// so a test can migrate the VM mid-run. A module load must answer the
// documented error; unsupported entry points must say so; host memory from
// cuMemAllocHost round-trips through device memory. Every result
// line starts with "cuda: "; the run ends with "cuda: digest HEX" (over
// every checksum) and "cuda: result ok" or "cuda: result FAIL".
//
// Build: gcc -O2 -I<dir of cuda.h> -o probe probe.c -L<dir of libcuda.so.1> -lcuda
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failed;

static const char *name(CUresult r) {
	const char *s = 0;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) {
		return "?";
	}
	return s;
}

#define CHECK(call)                                                                  \
	do {                                                                         \
		CUresult r_ = (call);                                                \
		if (r_ != CUDA_SUCCESS) {                                            \
			const char *t_ = 0;                                          \
			cuGetErrorString(r_, &t_);                                   \
			printf("cuda: FAIL %s: %s (%s)\n", #call, name(r_), t_ ? t_ : "?"); \
			failed = 1;                                                  \
			goto out;                                                    \
		}                                                                    \
	} while (0)

#define EXPECT(call, want)                                                           \
	do {                                                                         \
		CUresult r_ = (call);                                                \
		printf("cuda: %s = %s\n", #call, name(r_));                          \
		if (r_ != (want)) {                                                  \
			printf("cuda: FAIL want %s\n", name(want));                  \
			failed = 1;                                                  \
		}                                                                    \
	} while (0)

// FNV-1a, 64 bits.
static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n) {
	for (size_t i = 0; i < n; i++) {
		h = (h ^ p[i]) * 1099511628211ull;
	}
	return h;
}

static const char ptx[] =
	".version 7.0\n.target sm_52\n.address_size 64\n"
	".visible .entry touch(.param .u64 base, .param .u64 n)\n{\n\tret;\n}\n";

enum { SIZE = 1 << 20 };

int main(int argc, char **argv) {
	int iters = argc > 1 ? atoi(argv[1]) : 40;
	int pace = argc > 2 ? atoi(argv[2]) : 0;
	unsigned char *host = malloc(SIZE), *back = malloc(SIZE);
	uint64_t digest = 1469598103934665603ull;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr a = 0, b = 0;
	CUstream s = 0;
	CUevent start = 0, stop = 0;
	int v, n, major, minor, threads;
	char devname[64];
	CUuuid uuid;
	size_t total, free_, total2;

	EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CHECK(cuInit(0));
	CHECK(cuDriverGetVersion(&v));
	CHECK(cuDeviceGetCount(&n));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetName(devname, sizeof devname, dev));
	CHECK(cuDeviceGetUuid(&uuid, dev));
	CHECK(cuDeviceTotalMem(&total, dev));
	CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	CHECK(cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
	printf("cuda: driver %d devices %d name \"%s\" memory %zu compute %d.%d threads/block %d uuid %016llx\n",
	       v, n, devname, total, major, minor, threads, (unsigned long long)fnv(0, (unsigned char *)uuid.bytes, 16));
	EXPECT(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);

	CHECK(cuCtxCreate(&ctx, 0, dev));
	CHECK(cuMemAlloc(&a, SIZE));
	CHECK(cuMemAlloc(&b, SIZE));
	CHECK(cuMemGetInfo(&free_, &total2));
	printf("cuda: allocated 2 MiB, %zu of %zu bytes free\n", free_, total2);
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&start, 0));
	CHECK(cuEventCreate(&stop, 0));

	{
		CUmodule m;
		EXPECT(cuModuleLoadData(&m, ptx), CUDA_ERROR_NOT_SUPPORTED);
		void *fn = 0;
		CUdriverProcAddressQueryResult st;
		CHECK(cuGetProcAddress("cuMemAlloc", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st));
		printf("cuda: cuGetProcAddress(cuMemAlloc) %s\n", fn == (void *)cuMemAlloc_v2 ? "is cuMemAlloc_v2" : "FAIL");
		failed |= fn != (void *)cuMemAlloc_v2;
		EXPECT(cuGetProcAddress("cuNoSuchThing", &fn, CUDA_VERSION, 0, &st), CUDA_ERROR_NOT_FOUND);
		CUgraph g;
		EXPECT(cuGraphCreate(&g, 0), CUDA_ERROR_NOT_SUPPORTED);
		EXPECT(cuMemcpyHtoD(a + SIZE - 8, host, 16), CUDA_ERROR_INVALID_VALUE);
		unsigned char *p = 0;
		CHECK(cuMemAllocHost((void **)&p, 4096));
		for (int i = 0; i < 4096; i++) {
			p[i] = (unsigned char)(i * 13);
		}
		CHECK(cuMemcpyHtoD(b, p, 4096));
		memset(p, 0, 4096);
		CHECK(cuMemcpyDtoH(p, b, 4096));
		int same = 1;
		for (int i = 0; i < 4096; i++) {
			same &= p[i] == (unsigned char)(i * 13);
		}
		printf("cuda: cuMemAllocHost page-aligned %d round trip %s\n", ((uintptr_t)p & 4095) == 0, same ? "ok" : "FAIL");
		failed |= !same || ((uintptr_t)p & 4095) != 0;
		CHECK(cuMemFreeHost(p));
	}

	for (int it = 0; it < iters; it++) {
		for (int i = 0; i < SIZE; i++) {
			host[i] = (unsigned char)(i * 31 + it * 7 + (i >> 12));
		}
		CHECK(cuMemcpyHtoD(a, host, SIZE));
		CHECK(cuMemsetD8(a + 1 + it, (unsigned char)it, 4093));
		CHECK(cuMemsetD32(a + 8192, 0xa5000000u + it, 1024));
		CHECK(cuEventRecord(start, s));
		CHECK(cuMemcpyDtoDAsync(b, a, SIZE, s));
		CHECK(cuMemsetD16Async(b + 2 * it, (unsigned short)(0x1111 * it), 3000, s));
		CHECK(cuEventRecord(stop, s));
		CHECK(cuStreamWaitEvent(0, stop, 0));
		CHECK(cuEventSynchronize(stop));
		float ms = -1;
		CHECK(cuEventElapsedTime(&ms, start, stop));
		if (ms < 0) {
			printf("cuda: FAIL elapsed %f ms\n", ms);
			failed = 1;
		}
		CHECK(cuStreamSynchronize(s));
		CHECK(cuMemcpyDtoHAsync(back, b, SIZE, s));
		uint64_t sum = fnv(1469598103934665603ull, back, SIZE);
		CHECK(cuMemcpyDtoH(back, a, SIZE));
		sum = fnv(sum, back, SIZE);
		digest = fnv(digest, (unsigned char *)&sum, sizeof sum);
		printf("cuda: iter %d checksum %016llx\n", it, (unsigned long long)sum);
		fflush(stdout);
		if (pace > 0) {
			struct timespec ts = {pace / 1000, (pace % 1000) * 1000000L};
			nanosleep(&ts, 0);
		}
	}
	CHECK(cuEventDestroy(start));
	CHECK(cuEventDestroy(stop));
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	CHECK(cuCtxDestroy(ctx));
	printf("cuda: digest %016llx\n", (unsigned long long)digest);
out:
	printf("cuda: result %s\n", failed ? "FAIL" : "ok");
	return failed;
}
