// The C types of the CUDA driver API that libcuda.so.1's entry points take,
// declared here as NVIDIA's cuda.h (CUDA 12.4) declares them, so that the
// library builds without that header. Handles are opaque pointers the
// library fills with its own small numbers (guest/cudadrv.Handle).
#ifndef GMIG_LIBCUDA_SHIM_H
#define GMIG_LIBCUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;

// CUdriverProcAddressQueryResult (cuda.h).
#define GMIG_PROC_SUCCESS 0
#define GMIG_PROC_SYMBOL_NOT_FOUND 1

// Handles cross between Go's uintptr and the C pointer types here, where
// the conversion is plain C.
static inline uintptr_t gmig_h(const void *p) { return (uintptr_t)p; }
static inline void *gmig_p(uintptr_t h) { return (void *)h; }

// One argument of cuLaunchKernel's kernelParams.
static inline void *gmig_param(void **params, int i) { return params[i]; }

// An entry point by name (procaddr.c, unsupported.c).
struct gmig_entry {
	const char *name;
	void *fn;
};
extern const struct gmig_entry gmig_unsupported[];

// gmig_lookup finds an entry point by name as CUDA version version has
// it (procaddr.c).
void *gmig_lookup(const char *name, int version);

#endif
