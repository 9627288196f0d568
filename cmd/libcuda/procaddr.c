// cuGetProcAddress's table: the entry points by name. gmig_lookup takes a
// base name ("cuMemAlloc", as loaders such as cuda-python ask) with the
// CUDA version whose signature the caller expects, or an exported name
// ("cuMemAlloc_v2"), with or without the per-thread default-stream
// suffixes _ptds and _ptsz (every stream is ordered on the one ring, so
// those are the same functions here). A base name gives the implemented
// entry point whose signature that version has; where the version expects
// a signature this library does not implement it gives nothing
// (CUDA_ERROR_NOT_FOUND), never a function of another signature.
#include <string.h>
#include "_cgo_export.h"

// The implemented entry points (exports*.go).
static const struct gmig_entry implemented[] = {
	{"cuCtxCreate_v2", (void *)cuCtxCreate_v2},
	{"cuCtxDestroy_v2", (void *)cuCtxDestroy_v2},
	{"cuCtxGetApiVersion", (void *)cuCtxGetApiVersion},
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
	{"cuFuncGetAttribute", (void *)cuFuncGetAttribute},
	{"cuFuncGetParamInfo", (void *)cuFuncGetParamInfo},
	{"cuGetErrorName", (void *)cuGetErrorName},
	{"cuGetErrorString", (void *)cuGetErrorString},
	{"cuGetProcAddress", (void *)cuGetProcAddress},
	{"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2},
	{"cuInit", (void *)cuInit},
	{"cuLaunchKernel", (void *)cuLaunchKernel},
	{"cuMemAllocHost_v2", (void *)cuMemAllocHost_v2},
	{"cuMemAlloc_v2", (void *)cuMemAlloc_v2},
	{"cuMemFreeHost", (void *)cuMemFreeHost},
	{"cuMemFree_v2", (void *)cuMemFree_v2},
	{"cuMemGetAddressRange_v2", (void *)cuMemGetAddressRange_v2},
	{"cuMemGetInfo_v2", (void *)cuMemGetInfo_v2},
	{"cuMemHostAlloc", (void *)cuMemHostAlloc},
	{"cuMemHostGetDevicePointer_v2", (void *)cuMemHostGetDevicePointer_v2},
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


// Signature history of the implemented entry points whose base name meant
// another signature before or after (cuda.h of CUDA 12.4, and of 13.x for
// cuCtxCreate, as cuda-python 13's driver bindings ask for it): since is
// the CUDA version that introduced the signature the entry point has,
// until the version from which the base name has one this library does
// not implement (0: none). Entry points not listed have one signature
// since their introduction, or _v2 forms of the same arguments
// (cuCtxDestroy_v2, cuStreamDestroy_v2, cuDevicePrimaryCtxRelease_v2, ...).
static const struct {
	const char *name;
	int since, until;
} history[] = {
	{"cuCtxCreate_v2", 3020, 11040}, // cuCtxCreate_v3 (11.4) adds exec-affinity parameters, _v4 (12.5) CUctxCreateParams
	{"cuDeviceTotalMem_v2", 3020, 0},
	{"cuGetProcAddress", 11030, 12000}, // cuGetProcAddress_v2 (12.0) adds symbolStatus
	{"cuGetProcAddress_v2", 12000, 0},
	{"cuMemAlloc_v2", 3020, 0}, // the _v2 forms of 3.2 took 64-bit sizes and pointers
	{"cuMemAllocHost_v2", 3020, 0},
	{"cuMemFree_v2", 3020, 0},
	{"cuMemGetAddressRange_v2", 3020, 0},
	{"cuMemGetInfo_v2", 3020, 0},
	{"cuMemHostGetDevicePointer_v2", 3020, 0},
	{"cuMemcpyDtoDAsync_v2", 3020, 0},
	{"cuMemcpyDtoD_v2", 3020, 0},
	{"cuMemcpyDtoHAsync_v2", 3020, 0},
	{"cuMemcpyDtoH_v2", 3020, 0},
	{"cuMemcpyHtoDAsync_v2", 3020, 0},
	{"cuMemcpyHtoD_v2", 3020, 0},
	{"cuMemsetD16_v2", 3020, 0},
	{"cuMemsetD32_v2", 3020, 0},
	{"cuMemsetD8_v2", 3020, 0},
	{"cuModuleGetGlobal_v2", 3020, 0},
	{0, 0, 0},
};

static void since_until(const char *name, int *since, int *until) {
	*since = 0;
	*until = 0;
	for (int i = 0; history[i].name; i++) {
		if (!strcmp(history[i].name, name)) {
			*since = history[i].since;
			*until = history[i].until;
			return;
		}
	}
}

// unthreaded copies name without a _ptds/_ptsz suffix into buf.
static void unthreaded(const char *name, char *buf, size_t n) {
	size_t len = strnlen(name, n - 1);
	memcpy(buf, name, len);
	buf[len] = 0;
	char *u = strrchr(buf, '_');
	if (u && (!strcmp(u, "_ptds") || !strcmp(u, "_ptsz"))) {
		*u = 0;
	}
}

// versioned reports whether name ends in a _vN suffix.
static int versioned(const char *name) {
	const char *u = strrchr(name, '_');
	return u && u[1] == 'v' && u[2] >= '0' && u[2] <= '9';
}

// base copies name without a _vN suffix into buf (name has no _ptds/_ptsz).
static void base(const char *name, char *buf, size_t n) {
	size_t len = strnlen(name, n - 1);
	memcpy(buf, name, len);
	buf[len] = 0;
	if (versioned(buf)) {
		*strrchr(buf, '_') = 0;
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

// findVersion finds base name want as CUDA version version has it among
// the implemented entry points: the one of the latest signature introduced
// at or before version; none where version expects a newer signature
// (history's until) or an older one than every implemented one.
static void *findVersion(const char *want, int version) {
	char b[128];
	void *fn = 0;
	int best = -1, until = 0;
	for (const struct gmig_entry *t = implemented; t->name; t++) {
		int s, u;
		base(t->name, b, sizeof b);
		since_until(t->name, &s, &u);
		if (!strcmp(b, want) && s <= version && s > best) {
			fn = t->fn;
			best = s;
			until = u;
		}
	}
	if (fn && until && version >= until) {
		return 0;
	}
	return fn;
}

void *gmig_lookup(const char *name, int version) {
	char n[128], b[128];
	void *fn;
	unthreaded(name, n, sizeof n);
	if (versioned(n)) {
		// An exported name: itself, its stub if cuda.h declares it and it
		// is not implemented, nothing if neither (cuCtxGetDevice_v2 of
		// CUDA 13 is not cuCtxGetDevice).
		if ((fn = find(implemented, n))) {
			return fn;
		}
		return find(gmig_unsupported, n);
	}
	base(n, b, sizeof b);
	if ((fn = findVersion(b, version))) {
		return fn;
	}
	for (const struct gmig_entry *t = implemented; t->name; t++) {
		int s, u;
		base(t->name, b, sizeof b);
		since_until(t->name, &s, &u);
		if (!strcmp(b, n) && u && version >= u) {
			return 0; // a newer signature than the one implemented
		}
	}
	// Older than every implemented signature (cuMemAlloc of CUDA 2.0), or
	// not implemented at all: the stub of the plain name.
	return find(gmig_unsupported, n);
}
