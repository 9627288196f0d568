"""A stand-in for cuda-python's cuda.bindings.driver, for testing vecadd.py
without cuda-python (TestVecaddPyOnFakeDriver): the entry points vecadd.py
calls, over whichever libcuda.so.1 the loader finds (there, fakecuda.c),
with the bindings' conventions: each call returns a tuple, its CUresult
first and then what the C call writes through its pointers; handles are
objects that int() turns into their value; host buffers are addresses.
"""
import ctypes
import enum

_lib = ctypes.CDLL("libcuda.so.1")


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_SUPPORTED = 801


class _Handle:
    def __init__(self, value=0):
        self._v = ctypes.c_uint64(value)

    def __int__(self):
        return self._v.value


class CUdevice(_Handle):
    pass


class CUcontext(_Handle):
    pass


class CUmodule(_Handle):
    pass


class CUfunction(_Handle):
    pass


class CUdeviceptr(_Handle):
    pass


def _r(code):
    try:
        return CUresult(code)
    except ValueError:
        return code


def _call(name, *args):
    return _r(getattr(_lib, name)(*args))


def cuGetErrorName(err):
    s = ctypes.c_char_p()
    return _r(_lib.cuGetErrorName(int(err), ctypes.byref(s))), s.value


def cuInit(flags):
    return (_call("cuInit", ctypes.c_uint(flags)),)


def cuDeviceGet(ordinal):
    d = ctypes.c_int()
    return _call("cuDeviceGet", ctypes.byref(d), ctypes.c_int(ordinal)), CUdevice(d.value)


def cuDevicePrimaryCtxRetain(dev):
    c = CUcontext()
    return _call("cuDevicePrimaryCtxRetain", ctypes.byref(c._v), ctypes.c_int(int(dev))), c


def cuCtxSetCurrent(ctx):
    return (_call("cuCtxSetCurrent", ctypes.c_void_p(int(ctx))),)


def cuModuleLoadData(image):
    m = CUmodule()
    return _call("cuModuleLoadData", ctypes.byref(m._v), ctypes.c_char_p(bytes(image))), m


def cuModuleGetFunction(mod, name):
    f = CUfunction()
    return _call("cuModuleGetFunction", ctypes.byref(f._v), ctypes.c_void_p(int(mod)), ctypes.c_char_p(name)), f


def cuModuleUnload(mod):
    return (_call("cuModuleUnload", ctypes.c_void_p(int(mod))),)


def cuMemAlloc(size):
    p = CUdeviceptr()
    return _call("cuMemAlloc_v2", ctypes.byref(p._v), ctypes.c_size_t(size)), p


def cuMemFree(p):
    return (_call("cuMemFree_v2", ctypes.c_uint64(int(p))),)


def cuMemcpyHtoD(dst, src, n):
    return (_call("cuMemcpyHtoD_v2", ctypes.c_uint64(int(dst)), ctypes.c_void_p(src), ctypes.c_size_t(n)),)


def cuMemcpyDtoH(dst, src, n):
    return (_call("cuMemcpyDtoH_v2", ctypes.c_void_p(dst), ctypes.c_uint64(int(src)), ctypes.c_size_t(n)),)


def cuMemsetD32(dst, value, n):
    return (_call("cuMemsetD32_v2", ctypes.c_uint64(int(dst)), ctypes.c_uint(value), ctypes.c_size_t(n)),)


def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    u = ctypes.c_uint
    return (_call("cuLaunchKernel", ctypes.c_void_p(int(f)), u(gx), u(gy), u(gz), u(bx), u(by), u(bz), u(shared),
                  ctypes.c_void_p(int(stream)), ctypes.c_void_p(params), ctypes.c_void_p(extra)),)
