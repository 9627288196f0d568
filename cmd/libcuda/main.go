// Command libcuda is the guest's libcuda.so.1: NVIDIA's CUDA driver API
// over the gmig vGPU, loaded by unmodified programs as they load NVIDIA's
// (linked against it, dlopen'd, or resolved entry by entry through
// cuGetProcAddress). Built as a C shared library:
//
//	go build -buildmode=c-shared -ldflags=-extldflags=-Wl,-soname,libcuda.so.1 -o libcuda.so.1 ./cmd/libcuda
//
// exports*.go hold the exported entry points, which only convert types and
// call guest/cudadrv; procaddr.c maps names to them for cuGetProcAddress and
// answers every other entry point of cuda.h (unsupported.c) with
// CUDA_ERROR_NOT_SUPPORTED, logged once each. The vGPU is found through
// sysfs (internal/sysfs) at cuInit, polled (no interrupts); on a host,
// GMIG_CUDA_SOCKET names a vGPU socket to use instead, and
// GMIG_CUDA_STAGING_CHUNK sets the host copies' staging chunk. Logs go to
// standard error as JSON lines, at the level GMIG_CUDA_LOG names (default
// warn). docs/cuda.md is the user's guide.
package main

/*
#include "shim.h"
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/guest/cudadrv"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/sysfs"
)

var lib = newLib(logger())

// newLib configures the library from its environment.
func newLib(log zerolog.Logger) *cudadrv.Lib {
	return cudadrv.New(cudadrv.Config{Open: openBus, StagingChunk: stagingChunk(os.Getenv, log), Log: log})
}

// stagingChunk is GMIG_CUDA_STAGING_CHUNK (cudadrv.ParseStagingChunk): 0,
// the library's default, when it is unset or, logged, when it is bad.
func stagingChunk(getenv func(string) string, log zerolog.Logger) uint64 {
	s := getenv("GMIG_CUDA_STAGING_CHUNK")
	if s == "" {
		return 0
	}
	n, err := cudadrv.ParseStagingChunk(s)
	if err != nil {
		log.Warn().Err(err).Uint64("default", cudadrv.DefaultStagingChunk).
			Msg("libcuda: GMIG_CUDA_STAGING_CHUNK ignored; using the default")
		return 0
	}
	return n
}

// openBus reaches the vGPU: through sysfs in a guest, or, when
// GMIG_CUDA_SOCKET names a vGPU's vfio-user socket, over the in-process
// simulator (a program on the host, as the tests run one).
func openBus() (guest.Bus, error) {
	if sock := os.Getenv("GMIG_CUDA_SOCKET"); sock != "" {
		return sim.Attach(sock, sim.Options{NoIRQ: true})
	}
	return sysfs.Open(sysfs.Options{IRQ: sysfs.IRQNone})
}

func logger() zerolog.Logger {
	level, err := zerolog.ParseLevel(os.Getenv("GMIG_CUDA_LOG"))
	if err != nil || level == zerolog.NoLevel {
		level = zerolog.WarnLevel
	}
	return zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("lib", "libcuda").Logger()
}

// thread is the calling OS thread: a cgo call from C runs on the thread
// that made it.
func thread() cudadrv.Thread { return cudadrv.Thread(unix.Gettid()) }

func main() {}

// errorStrings keeps the C strings cuGetErrorName and cuGetErrorString hand
// out: the caller keeps the pointer, so each is made once and never freed.
var errorStrings sync.Map // string -> *C.char

func cString(s string) *C.char {
	if v, ok := errorStrings.Load(s); ok {
		return v.(*C.char)
	}
	v, _ := errorStrings.LoadOrStore(s, C.CString(s))
	return v.(*C.char)
}

//export cuGetErrorName
func cuGetErrorName(res C.CUresult, s **C.char) C.CUresult {
	if s == nil {
		return errInvalid
	}
	n, ok := cudadrv.Result(res).Name()
	if !ok {
		*s = nil
		return errInvalid
	}
	*s = cString(n)
	return 0
}

//export cuGetErrorString
func cuGetErrorString(res C.CUresult, s **C.char) C.CUresult {
	if s == nil {
		return errInvalid
	}
	t, ok := cudadrv.Result(res).Text()
	if !ok {
		*s = nil
		return errInvalid
	}
	*s = cString(t)
	return 0
}

//export gmigUnsupported
func gmigUnsupported(name *C.char) C.CUresult { return r(lib.Unsupported(C.GoString(name))) }

//export cuGetProcAddress
func cuGetProcAddress(symbol *C.char, pfn *unsafe.Pointer, version C.int, flags C.cuuint64_t) C.CUresult {
	return cuGetProcAddress_v2(symbol, pfn, version, flags, nil)
}

// cuGetProcAddress_v2 finds symbol (a base name, "cuMemAlloc", or an
// exported one, "cuMemAlloc_v2") among the entry points, as CUDA version
// version declares it (procaddr.c); the flags (per-thread default stream
// or not) make no difference: every stream is ordered on the one ring.
//
//export cuGetProcAddress_v2
func cuGetProcAddress_v2(symbol *C.char, pfn *unsafe.Pointer, version C.int, flags C.cuuint64_t, status *C.int) C.CUresult {
	if symbol == nil || pfn == nil {
		return errInvalid
	}
	*pfn = C.gmig_lookup(symbol, version)
	if *pfn == nil {
		if status != nil {
			*status = C.GMIG_PROC_SYMBOL_NOT_FOUND
		}
		return r(cudadrv.ErrNotFound)
	}
	if status != nil {
		*status = C.GMIG_PROC_SUCCESS
	}
	return 0
}
