#!/usr/bin/env python3
"""vecadd.py: vecadd.c in Python, through cuda-python's driver bindings only
(cuda.bindings.driver, cuda-python 13.x), so the bindings' loader
(cuGetProcAddress) finds the same entry points a C program links.

c = a + b on the GPU (the vecAdd kernel of the same PTX module as the C
programs), checked against the CPU's float sum to the bit. Arguments: N
(default 1<<20), ITERS (default 1) and PACE, milliseconds slept after each
iteration (default 0). It prints exactly what vecadd.c prints for the same
arguments: "vecadd: n N", per iteration "vecadd: iter I digest H" (FNV-1a
over c's bytes, hex), then "vecadd: ok"; or "vecadd: FAIL ..." and status 1,
any CUDA error named as cuGetErrorName names it, after the C call it stands
for. docs/cuda.md, "Programs".

Run: python3 vecadd.py [N [ITERS [PACE_MS]]]   (pip install cuda-python)
"""
import array
import ctypes
import sys
import time

from cuda.bindings import driver as cu

# The kernels' PTX module, character for character the one in cudaprog.h.
PTX = """\
.version 7.0
.target sm_52
.address_size 64

.visible .entry vecAdd(
	.param .u64 vecAdd_param_0,
	.param .u64 vecAdd_param_1,
	.param .u64 vecAdd_param_2,
	.param .u32 vecAdd_param_3
)
{
	.reg .pred %p<2>;
	.reg .f32 %f<4>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<11>;

	ld.param.u64 %rd1, [vecAdd_param_0];
	ld.param.u64 %rd2, [vecAdd_param_1];
	ld.param.u64 %rd3, [vecAdd_param_2];
	ld.param.u32 %r2, [vecAdd_param_3];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.s32 %p1, %r1, %r2;
	@%p1 bra vecAdd_done;
	cvta.to.global.u64 %rd4, %rd1;
	mul.wide.s32 %rd5, %r1, 4;
	add.s64 %rd6, %rd4, %rd5;
	ld.global.f32 %f1, [%rd6];
	cvta.to.global.u64 %rd7, %rd2;
	add.s64 %rd8, %rd7, %rd5;
	ld.global.f32 %f2, [%rd8];
	add.rn.f32 %f3, %f1, %f2;
	cvta.to.global.u64 %rd9, %rd3;
	add.s64 %rd10, %rd9, %rd5;
	st.global.f32 [%rd10], %f3;
vecAdd_done:
	ret;
}

.visible .entry scaleAdd(
	.param .u64 scaleAdd_param_0,
	.param .u64 scaleAdd_param_1,
	.param .f32 scaleAdd_param_2,
	.param .u32 scaleAdd_param_3
)
{
	.reg .pred %p<2>;
	.reg .f32 %f<6>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<9>;

	ld.param.u64 %rd1, [scaleAdd_param_0];
	ld.param.u64 %rd2, [scaleAdd_param_1];
	ld.param.f32 %f1, [scaleAdd_param_2];
	ld.param.u32 %r2, [scaleAdd_param_3];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.s32 %p1, %r1, %r2;
	@%p1 bra scaleAdd_done;
	cvta.to.global.u64 %rd3, %rd1;
	mul.wide.s32 %rd4, %r1, 4;
	add.s64 %rd5, %rd3, %rd4;
	ld.global.f32 %f2, [%rd5];
	cvta.to.global.u64 %rd6, %rd2;
	add.s64 %rd7, %rd6, %rd4;
	ld.global.f32 %f3, [%rd7];
	mul.rn.f32 %f4, %f1, %f2;
	add.rn.f32 %f5, %f4, %f3;
	st.global.f32 [%rd7], %f5;
scaleAdd_done:
	ret;
}

.visible .entry matMulTiled(
	.param .u64 matMulTiled_param_0,
	.param .u64 matMulTiled_param_1,
	.param .u64 matMulTiled_param_2,
	.param .u32 matMulTiled_param_3
)
{
	.reg .pred %p<3>;
	.reg .f32 %f<5>;
	.reg .b32 %r<26>;
	.reg .b64 %rd<10>;
	.shared .align 4 .b8 matMulTiled_As[1024];
	.shared .align 4 .b8 matMulTiled_Bs[1024];

	ld.param.u64 %rd1, [matMulTiled_param_0];
	ld.param.u64 %rd2, [matMulTiled_param_1];
	ld.param.u64 %rd3, [matMulTiled_param_2];
	ld.param.u32 %r1, [matMulTiled_param_3];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	cvta.to.global.u64 %rd3, %rd3;
	mov.u32 %r2, %tid.x;
	mov.u32 %r3, %tid.y;
	mov.u32 %r4, %ctaid.x;
	mov.u32 %r5, %ctaid.y;
	shl.b32 %r6, %r5, 4;
	add.s32 %r6, %r6, %r3;
	shl.b32 %r7, %r4, 4;
	add.s32 %r7, %r7, %r2;
	shr.u32 %r8, %r1, 4;
	mov.u32 %r9, matMulTiled_As;
	mov.u32 %r10, matMulTiled_Bs;
	shl.b32 %r11, %r3, 4;
	add.s32 %r11, %r11, %r2;
	shl.b32 %r11, %r11, 2;
	add.s32 %r12, %r9, %r11;
	add.s32 %r13, %r10, %r11;
	shl.b32 %r14, %r3, 6;
	add.s32 %r14, %r9, %r14;
	shl.b32 %r15, %r2, 2;
	add.s32 %r15, %r10, %r15;
	mov.f32 %f1, 0f00000000;
	mov.u32 %r16, 0;
	setp.eq.u32 %p1, %r8, 0;
	@%p1 bra matMulTiled_store;
matMulTiled_tile:
	shl.b32 %r17, %r16, 4;
	mad.lo.s32 %r18, %r6, %r1, %r17;
	add.s32 %r18, %r18, %r2;
	mul.wide.u32 %rd4, %r18, 4;
	add.s64 %rd5, %rd1, %rd4;
	ld.global.f32 %f2, [%rd5];
	st.shared.f32 [%r12], %f2;
	add.s32 %r19, %r17, %r3;
	mad.lo.s32 %r19, %r19, %r1, %r7;
	mul.wide.u32 %rd6, %r19, 4;
	add.s64 %rd7, %rd2, %rd6;
	ld.global.f32 %f3, [%rd7];
	st.shared.f32 [%r13], %f3;
	bar.sync 0;
	mov.u32 %r20, 0;
matMulTiled_k:
	shl.b32 %r21, %r20, 2;
	add.s32 %r22, %r14, %r21;
	ld.shared.f32 %f2, [%r22];
	shl.b32 %r23, %r20, 6;
	add.s32 %r24, %r15, %r23;
	ld.shared.f32 %f3, [%r24];
	mul.rn.f32 %f4, %f2, %f3;
	add.rn.f32 %f1, %f1, %f4;
	add.s32 %r20, %r20, 1;
	setp.lt.u32 %p2, %r20, 16;
	@%p2 bra matMulTiled_k;
	bar.sync 0;
	add.s32 %r16, %r16, 1;
	setp.lt.u32 %p1, %r16, %r8;
	@%p1 bra matMulTiled_tile;
matMulTiled_store:
	mad.lo.s32 %r25, %r6, %r1, %r7;
	mul.wide.u32 %rd8, %r25, 4;
	add.s64 %rd9, %rd3, %rd8;
	st.global.f32 [%rd9], %f1;
	ret;
}

.visible .entry empty()
{
	ret;
}
"""


def check(call, res):
    """The values of a driver call's result; any error ends the program with
    status 1, naming the C call (as vecadd.c prints it) and the error."""
    err, rest = res[0], res[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        e, name = cu.cuGetErrorName(err)
        text = name.decode() if e == cu.CUresult.CUDA_SUCCESS else "CUDA_ERROR_UNKNOWN"
        print(f"vecadd: FAIL {call}: {text}", flush=True)
        sys.exit(1)
    if len(rest) == 1:
        return rest[0]
    return rest


def fill_floats(n, seed):
    """cudaprog.h's fill_floats: values in [-8, 8), multiples of 2^-20, from
    the same 32-bit LCG; exact in a double and in a float."""
    s = (seed * 2654435761 + 1) & 0xFFFFFFFF
    out = array.array("f", bytes(4 * n))
    for i in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = (s >> 8) / 1048576.0 - 8.0
    return out


def fnv(h, data):
    """FNV-1a, 64 bits, over data's bytes, continuing from h."""
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


FNV_INIT = 14695981039346656037  # the offset basis


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 1 << 20
    iters = int(argv[2]) if len(argv) > 2 else 1
    pace = int(argv[3]) if len(argv) > 3 else 0
    if n <= 0 or iters <= 0:
        print("vecadd: FAIL usage: vecadd [N [ITERS [PACE_MS]]], N and ITERS > 0")
        return 2
    nbytes = 4 * n

    check("cuInit(0)", cu.cuInit(0))
    dev = check("cuDeviceGet(&dev, 0)", cu.cuDeviceGet(0))
    ctx = check("cuDevicePrimaryCtxRetain(&ctx, dev)", cu.cuDevicePrimaryCtxRetain(dev))
    check("cuCtxSetCurrent(ctx)", cu.cuCtxSetCurrent(ctx))
    mod = check("cuModuleLoadData(&mod, kernels_ptx)", cu.cuModuleLoadData(PTX.encode() + b"\0"))
    fn = check('cuModuleGetFunction(&fn, mod, "vecAdd")', cu.cuModuleGetFunction(mod, b"vecAdd"))
    da = check("cuMemAlloc(&da, bytes)", cu.cuMemAlloc(nbytes))
    db = check("cuMemAlloc(&db, bytes)", cu.cuMemAlloc(nbytes))
    dc = check("cuMemAlloc(&dc, bytes)", cu.cuMemAlloc(nbytes))
    print(f"vecadd: n {n}")
    failed = False
    c = array.array("f", bytes(nbytes))
    for it in range(iters):
        a = fill_floats(n, 2 * it + 1)
        b = fill_floats(n, 2 * it + 2)
        want = array.array("f", [x + y for x, y in zip(a, b)])
        check("cuMemcpyHtoD(da, a, bytes)", cu.cuMemcpyHtoD(da, a.buffer_info()[0], nbytes))
        check("cuMemcpyHtoD(db, b, bytes)", cu.cuMemcpyHtoD(db, b.buffer_info()[0], nbytes))
        check("cuMemsetD32(dc, 0xffffffffu, n)", cu.cuMemsetD32(dc, 0xFFFFFFFF, n))
        # vecAdd(a, b, c, n): three device pointers and an int, as
        # cuLaunchKernel's array of pointers to each parameter.
        vals = [ctypes.c_uint64(int(da)), ctypes.c_uint64(int(db)), ctypes.c_uint64(int(dc)), ctypes.c_int32(n)]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        check("cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, params, 0)",
              cu.cuLaunchKernel(fn, (n + 255) // 256, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(params), 0))
        check("cuMemcpyDtoH(c, dc, bytes)", cu.cuMemcpyDtoH(c.buffer_info()[0], dc, nbytes))
        got, exp = c.tobytes(), want.tobytes()
        if got != exp:
            bad = [i for i in range(n) if got[4 * i:4 * i + 4] != exp[4 * i:4 * i + 4]]
            i = bad[0]
            print(f"vecadd: FAIL iter {it} c[{i}] = {c[i].hex()}, want {want[i].hex()}")
            print(f"vecadd: FAIL iter {it}: {len(bad)} of {n} elements differ")
            failed = True
        print(f"vecadd: iter {it} digest {fnv(FNV_INIT, got):016x}", flush=True)
        if pace > 0:
            time.sleep(pace / 1000)
    for name, p in (("da", da), ("db", db), ("dc", dc)):
        check(f"cuMemFree({name})", cu.cuMemFree(p))
    check("cuModuleUnload(mod)", cu.cuModuleUnload(mod))
    print("vecadd: FAIL" if failed else "vecadd: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
