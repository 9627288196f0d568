// fakecuda: a stand-in libcuda.so.1 for testing the evidence programs'
// host side (TestProgramsOnFakeDriver): the entry points they call,
// defined through NVIDIA's cuda.h (so its #defines give them the names the
// programs link), device memory in host memory, every call done at once in
// call order, and the kernels of cudaprog.h played in C as their PTX
// computes them (each product and sum rounded on its own). It checks the
// programs' arguments (grid, block, parameters) the way a driver would.
// Not a driver: nothing runs on a GPU.
//
// Build: gcc -O2 -shared -fPIC -ffp-contract=off -I<dir of cuda.h> -Wl,-soname,libcuda.so.1 -o libcuda.so.1 fakecuda.c
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int ready;

#define NEED_INIT                                      \
	do {                                           \
		if (!ready) {                          \
			return CUDA_ERROR_NOT_INITIALIZED; \
		}                                      \
	} while (0)

CUresult CUDAAPI cuInit(unsigned int flags) {
	if (flags != 0) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	ready = 1;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
	switch (r) {
	case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case CUDA_ERROR_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
	case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal) {
	NEED_INIT;
	if (ordinal != 0) {
		return CUDA_ERROR_INVALID_DEVICE;
	}
	*d = 0;
	return CUDA_SUCCESS;
}

static int ctx_dummy;

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	NEED_INIT;
	*c = (CUcontext)&ctx_dummy;
	return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) { return c == (CUcontext)&ctx_dummy ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
CUresult CUDAAPI cuCtxSynchronize(void) { return CUDA_SUCCESS; }

static int module_dummy;

CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image) {
	NEED_INIT;
	if (strncmp(image, ".version 7.0\n.target sm_52\n", 27) != 0) {
		return CUDA_ERROR_INVALID_IMAGE;
	}
	*m = (CUmodule)&module_dummy;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule m) { return m == (CUmodule)&module_dummy ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

enum { K_VECADD = 1, K_SCALEADD, K_MATMUL, K_EMPTY };
static const char *const kernels[] = {"", "vecAdd", "scaleAdd", "matMulTiled", "empty"};

CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
	if (m != (CUmodule)&module_dummy) {
		return CUDA_ERROR_INVALID_HANDLE;
	}
	for (uintptr_t k = 1; k < sizeof kernels / sizeof kernels[0]; k++) {
		if (strcmp(name, kernels[k]) == 0) {
			*f = (CUfunction)k;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) {
	NEED_INIT;
	void *m = malloc(n);
	if (!m) {
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
	free((void *)(uintptr_t)p);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost(void **p, size_t n) {
	*p = malloc(n);
	return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
	free(p);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n) {
	memcpy((void *)(uintptr_t)d, h, n);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n) {
	memcpy(h, (void *)(uintptr_t)d, n);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s) {
	(void)s;
	return cuMemcpyHtoD(d, h, n);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s) {
	(void)s;
	return cuMemcpyDtoH(h, d, n);
}

CUresult CUDAAPI cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) {
	uint32_t *p = (uint32_t *)(uintptr_t)d;
	for (size_t i = 0; i < n; i++) {
		p[i] = v;
	}
	return CUDA_SUCCESS;
}

static int stream_dummy;

CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned int flags) {
	(void)flags;
	*s = (CUstream)&stream_dummy;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult CUDAAPI cuStreamSynchronize(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
	(void)s;
	return e && flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned int flags) {
	(void)flags;
	*e = calloc(1, sizeof(double));
	return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuEventDestroy(CUevent e) {
	free(e);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
	(void)s;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*(double *)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
	*ms = (float)(*(double *)b - *(double *)a);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra) {
	(void)s;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024 || shared != 0 || extra) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	uint64_t threads = (uint64_t)gx * gy * gz * bx * by * bz;
	switch ((uintptr_t)f) {
	case K_VECADD: {
		const float *a = *(float **)params[0], *b = *(float **)params[1];
		float *c = *(float **)params[2];
		int n = *(int *)params[3];
		if (gy != 1 || gz != 1 || by != 1 || bz != 1) {
			return CUDA_ERROR_INVALID_VALUE;
		}
		for (int i = 0; i < n && (uint64_t)i < threads; i++) {
			c[i] = a[i] + b[i];
		}
		return CUDA_SUCCESS;
	}
	case K_SCALEADD: {
		const float *x = *(float **)params[0];
		float *y = *(float **)params[1];
		float a = *(float *)params[2];
		int n = *(int *)params[3];
		for (int i = 0; i < n && (uint64_t)i < threads; i++) {
			float p = a * x[i];
			y[i] = p + y[i];
		}
		return CUDA_SUCCESS;
	}
	case K_MATMUL: {
		const float *A = *(float **)params[0], *B = *(float **)params[1];
		float *C = *(float **)params[2];
		int n = *(int *)params[3];
		if (bx != 16 || by != 16 || bz != 1 || gx * 16 != (unsigned)n || gy * 16 != (unsigned)n) {
			return CUDA_ERROR_INVALID_VALUE;
		}
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
		return CUDA_SUCCESS;
	}
	case K_EMPTY:
		return params == 0 || params[0] == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_ERROR_INVALID_HANDLE;
}
