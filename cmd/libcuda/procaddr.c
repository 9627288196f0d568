// cuGetProcAddress's table: the entry points by name. gmig_lookup takes an
// exported name ("cuMemAlloc_v2") or a base name ("cuMemAlloc", as
// loaders such as cuda-python ask), with or without the per-thread
// default-stream suffixes _ptds and _ptsz (every stream is ordered on the
// one ring, so those are the same functions here).
#include <string.h>
#include "_cgo_export.h"

// The implemented entry points (exports*.go).
static const struct gmig_entry implemented[] = {
	{"cuCtxCreate_v2", (void *)cuCtxCreate_v2},
	{"cuCtxDestroy_v2", (void *)cuCtxDestroy_v2},
	{"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
	{"cuCtxGetDevice", (void *)cuCtxGetDevice},
	{"cuCtxPopCurrent_v2", (void *)cuCtxPopCurrent_v2},
	{"cuCtxPushCurrent_v2", (void *)cuCtxPushCurrent_v2},
	{"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
	{"cuCtxSynchronize", (void *)cuCtxSynchronize},
	{"cuDeviceComputeCapability", (void *)cuDeviceComputeCapability},
	{"cuDeviceGet", (void *)cuDeviceGet},
	{"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
	{"cuDeviceGetCount", (void *)cuDeviceGetCount},
	{"cuDeviceGetName", (void *)cuDeviceGetName},
	{"cuDeviceGetUuid", (void *)cuDeviceGetUuid},
	{"cuDeviceGetUuid_v2", (void *)cuDeviceGetUuid_v2},
	{"cuDevicePrimaryCtxGetState", (void *)cuDevicePrimaryCtxGetState},
	{"cuDevicePrimaryCtxRelease_v2", (void *)cuDevicePrimaryCtxRelease_v2},
	{"cuDevicePrimaryCtxReset_v2", (void *)cuDevicePrimaryCtxReset_v2},
	{"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
	{"cuDevicePrimaryCtxSetFlags_v2", (void *)cuDevicePrimaryCtxSetFlags_v2},
	{"cuDeviceTotalMem_v2", (void *)cuDeviceTotalMem_v2},
	{"cuDriverGetVersion", (void *)cuDriverGetVersion},
	{"cuEventCreate", (void *)cuEventCreate},
	{"cuEventDestroy_v2", (void *)cuEventDestroy_v2},
	{"cuEventElapsedTime", (void *)cuEventElapsedTime},
	{"cuEventQuery", (void *)cuEventQuery},
	{"cuEventRecord", (void *)cuEventRecord},
	{"cuEventSynchronize", (void *)cuEventSynchronize},
	{"cuGetErrorName", (void *)cuGetErrorName},
	{"cuGetErrorString", (void *)cuGetErrorString},
	{"cuGetProcAddress", (void *)cuGetProcAddress},
	{"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2},
	{"cuInit", (void *)cuInit},
	{"cuLaunchKernel", (void *)cuLaunchKernel},
	{"cuMemAlloc_v2", (void *)cuMemAlloc_v2},
	{"cuMemFree_v2", (void *)cuMemFree_v2},
	{"cuMemGetAddressRange_v2", (void *)cuMemGetAddressRange_v2},
	{"cuMemGetInfo_v2", (void *)cuMemGetInfo_v2},
	{"cuMemcpyDtoDAsync_v2", (void *)cuMemcpyDtoDAsync_v2},
	{"cuMemcpyDtoD_v2", (void *)cuMemcpyDtoD_v2},
	{"cuMemcpyDtoHAsync_v2", (void *)cuMemcpyDtoHAsync_v2},
	{"cuMemcpyDtoH_v2", (void *)cuMemcpyDtoH_v2},
	{"cuMemcpyHtoDAsync_v2", (void *)cuMemcpyHtoDAsync_v2},
	{"cuMemcpyHtoD_v2", (void *)cuMemcpyHtoD_v2},
	{"cuMemsetD16Async", (void *)cuMemsetD16Async},
	{"cuMemsetD16_v2", (void *)cuMemsetD16_v2},
	{"cuMemsetD32Async", (void *)cuMemsetD32Async},
	{"cuMemsetD32_v2", (void *)cuMemsetD32_v2},
	{"cuMemsetD8Async", (void *)cuMemsetD8Async},
	{"cuMemsetD8_v2", (void *)cuMemsetD8_v2},
	{"cuModuleGetFunction", (void *)cuModuleGetFunction},
	{"cuModuleGetGlobal_v2", (void *)cuModuleGetGlobal_v2},
	{"cuModuleLoad", (void *)cuModuleLoad},
	{"cuModuleLoadData", (void *)cuModuleLoadData},
	{"cuModuleLoadDataEx", (void *)cuModuleLoadDataEx},
	{"cuModuleUnload", (void *)cuModuleUnload},
	{"cuStreamCreate", (void *)cuStreamCreate},
	{"cuStreamDestroy_v2", (void *)cuStreamDestroy_v2},
	{"cuStreamQuery", (void *)cuStreamQuery},
	{"cuStreamSynchronize", (void *)cuStreamSynchronize},
	{"cuStreamWaitEvent", (void *)cuStreamWaitEvent},
	{0, 0},
};

// base copies name without a _ptds/_ptsz and a _vN suffix into buf.
static void base(const char *name, char *buf, size_t n) {
	size_t len = strnlen(name, n - 1);
	memcpy(buf, name, len);
	buf[len] = 0;
	char *u = strrchr(buf, '_');
	if (u && (!strcmp(u, "_ptds") || !strcmp(u, "_ptsz"))) {
		*u = 0;
		u = strrchr(buf, '_');
	}
	if (u && u[1] == 'v' && u[2] >= '0' && u[2] <= '9') {
		*u = 0;
	}
}

static void *find(const struct gmig_entry *t, const char *want) {
	for (; t->name; t++) {
		if (!strcmp(t->name, want)) {
			return t->fn;
		}
	}
	return 0;
}

// findBase is find by base name; among several versions the newest wins,
// which is the one each entry's table row holds.
static void *findBase(const struct gmig_entry *t, const char *want) {
	char b[128];
	void *fn = 0;
	for (; t->name; t++) {
		base(t->name, b, sizeof b);
		if (!strcmp(b, want)) {
			fn = t->fn;
		}
	}
	return fn;
}

void *gmig_lookup(const char *name) {
	char b[128];
	void *fn;
	base(name, b, sizeof b);
	if ((fn = find(implemented, name)) || (fn = findBase(implemented, b))) {
		return fn;
	}
	if ((fn = find(gmig_unsupported, name)) || (fn = findBase(gmig_unsupported, b))) {
		return fn;
	}
	return 0;
}
