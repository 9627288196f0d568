package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// The programs' kernels (testdata/cudaprog.h) are hand-written PTX that
// only a GPU (or the CUDA model, which plays them by name) runs. ptxThread
// and ptxRun interpret exactly the instructions that PTX uses, one thread
// at a time up to each bar.sync, so TestKernelsPTX can check what each
// kernel computes against Go float32 arithmetic, one rounding per
// operation, before a GPU runs it.

type ptxInstr struct {
	guard string // predicate register, "" for none, "!%p" negated
	op    string // opcode with its modifiers, e.g. "ld.global.f32"
	args  []string
}

type ptxEntry struct {
	params []string       // names in order
	shared map[string]int // .shared variable -> its offset
	code   []ptxInstr
	labels map[string]int
}

// parsePTX splits module into its entries, keeping instructions only.
func parsePTX(t *testing.T, module string) map[string]*ptxEntry {
	t.Helper()
	entries := map[string]*ptxEntry{}
	var e *ptxEntry
	sharedEnd := 0
	for _, raw := range strings.Split(module, "\n") {
		l := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(l, ".visible .entry "):
			name := strings.TrimSuffix(strings.TrimPrefix(l, ".visible .entry "), "(")
			name = strings.TrimSuffix(name, "()")
			e = &ptxEntry{shared: map[string]int{}, labels: map[string]int{}}
			entries[name], sharedEnd = e, 0
		case e == nil, l == "", l == "{", l == "}", l == ")", strings.HasPrefix(l, ".reg "):
		case strings.HasPrefix(l, ".param "):
			f := strings.Fields(strings.TrimSuffix(l, ","))
			e.params = append(e.params, f[2])
		case strings.HasPrefix(l, ".shared "):
			// .shared .align 4 .b8 NAME[SIZE];
			f := strings.Fields(strings.TrimSuffix(l, ";"))
			name, size, _ := strings.Cut(strings.TrimSuffix(f[len(f)-1], "]"), "[")
			n, err := strconv.Atoi(size)
			if err != nil {
				t.Fatalf("PTX: %q: %v", l, err)
			}
			e.shared[name], sharedEnd = sharedEnd, sharedEnd+n
		case strings.HasSuffix(l, ":"):
			e.labels[strings.TrimSuffix(l, ":")] = len(e.code)
		default:
			in := ptxInstr{}
			l = strings.TrimSuffix(l, ";")
			if strings.HasPrefix(l, "@") {
				g, rest, _ := strings.Cut(l[1:], " ")
				in.guard, l = g, rest
			}
			op, rest, _ := strings.Cut(l, " ")
			in.op = op
			for _, a := range strings.Split(rest, ",") {
				if a = strings.TrimSpace(a); a != "" {
					in.args = append(in.args, a)
				}
			}
			e.code = append(e.code, in)
		}
	}
	return entries
}

// ptxMem is global memory: buffers at device addresses.
type ptxMem map[uint64][]byte

func (m ptxMem) at(addr uint64) []byte {
	for base, b := range m {
		if addr >= base && addr+4 <= base+uint64(len(b)) {
			return b[addr-base:]
		}
	}
	panic(fmt.Sprintf("PTX: global access at %#x outside every buffer", addr))
}

type ptxThread struct {
	reg      map[string]uint64
	pc       int
	tid, cta [3]uint32
	done     bool
}

// run runs th until bar.sync (true) or ret (false).
func (th *ptxThread) run(e *ptxEntry, params map[string]uint64, ntid [3]uint32, mem ptxMem, shared []byte) bool {
	val := func(a string) uint64 {
		switch {
		case strings.HasPrefix(a, "%"):
			if v, ok := th.reg[a]; ok {
				return v
			}
			sp := map[string]uint64{"%tid.x": uint64(th.tid[0]), "%tid.y": uint64(th.tid[1]), "%tid.z": uint64(th.tid[2]),
				"%ctaid.x": uint64(th.cta[0]), "%ctaid.y": uint64(th.cta[1]), "%ctaid.z": uint64(th.cta[2]),
				"%ntid.x": uint64(ntid[0]), "%ntid.y": uint64(ntid[1]), "%ntid.z": uint64(ntid[2])}
			if v, ok := sp[a]; ok {
				return v
			}
			panic("PTX: register " + a + " read before written")
		case strings.HasPrefix(a, "0f"):
			v, err := strconv.ParseUint(a[2:], 16, 32)
			if err != nil {
				panic(err)
			}
			return v
		}
		if off, ok := e.shared[a]; ok {
			return uint64(off)
		}
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			panic("PTX: operand " + a)
		}
		return uint64(v)
	}
	addr := func(a string) uint64 { return val(strings.Trim(a, "[]")) }
	f32 := func(a string) float32 { return math.Float32frombits(uint32(val(a))) }
	for {
		in := e.code[th.pc]
		th.pc++
		if g := in.guard; g != "" {
			if neg := strings.HasPrefix(g, "!"); (th.reg[strings.TrimPrefix(g, "!")] != 0) == neg {
				continue
			}
		}
		a := in.args
		set := func(v uint64) { th.reg[a[0]] = v }
		switch in.op {
		case "ret":
			th.done = true
			return false
		case "bar.sync":
			return true
		case "bra":
			th.pc = e.labels[a[0]]
		case "ld.param.u64", "ld.param.u32", "ld.param.f32":
			set(params[strings.Trim(a[1], "[]")])
		case "mov.u32", "mov.f32", "cvta.to.global.u64":
			set(val(a[1]))
		case "mad.lo.s32":
			set(uint64(uint32(int32(val(a[1]))*int32(val(a[2])) + int32(val(a[3])))))
		case "add.s32":
			set(uint64(uint32(val(a[1]) + val(a[2]))))
		case "add.s64":
			set(val(a[1]) + val(a[2]))
		case "shl.b32":
			set(uint64(uint32(val(a[1]) << val(a[2]))))
		case "shr.u32":
			set(uint64(uint32(val(a[1])) >> val(a[2])))
		case "mul.wide.s32":
			set(uint64(int64(int32(val(a[1]))) * int64(int32(val(a[2])))))
		case "mul.wide.u32":
			set(uint64(uint32(val(a[1]))) * uint64(uint32(val(a[2]))))
		case "setp.ge.s32":
			set(b2u(int32(val(a[1])) >= int32(val(a[2]))))
		case "setp.eq.u32":
			set(b2u(uint32(val(a[1])) == uint32(val(a[2]))))
		case "setp.lt.u32":
			set(b2u(uint32(val(a[1])) < uint32(val(a[2]))))
		case "add.rn.f32":
			set(uint64(math.Float32bits(f32(a[1]) + f32(a[2]))))
		case "mul.rn.f32":
			set(uint64(math.Float32bits(f32(a[1]) * f32(a[2]))))
		case "ld.global.f32":
			set(uint64(binary.LittleEndian.Uint32(mem.at(addr(a[1])))))
		case "st.global.f32":
			binary.LittleEndian.PutUint32(mem.at(addr(a[0])), uint32(val(a[1])))
		case "ld.shared.f32":
			set(uint64(binary.LittleEndian.Uint32(shared[addr(a[1]):])))
		case "st.shared.f32":
			binary.LittleEndian.PutUint32(shared[addr(a[0]):], uint32(val(a[1])))
		default:
			panic("PTX: instruction " + in.op + " not interpreted")
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// ptxRun runs entry e on a grid of blocks, the threads of a block in turn
// from one bar.sync to the next.
func ptxRun(t *testing.T, e *ptxEntry, grid, block [3]uint32, params []uint64, mem ptxMem) {
	t.Helper()
	if len(params) != len(e.params) {
		t.Fatalf("PTX: %d parameters for %d", len(params), len(e.params))
	}
	pm := map[string]uint64{}
	for i, p := range e.params {
		pm[p] = params[i]
	}
	for cz := uint32(0); cz < grid[2]; cz++ {
		for cy := uint32(0); cy < grid[1]; cy++ {
			for cx := uint32(0); cx < grid[0]; cx++ {
				shared := make([]byte, 48<<10)
				var ths []*ptxThread
				for z := uint32(0); z < block[2]; z++ {
					for y := uint32(0); y < block[1]; y++ {
						for x := uint32(0); x < block[0]; x++ {
							ths = append(ths, &ptxThread{reg: map[string]uint64{}, tid: [3]uint32{x, y, z}, cta: [3]uint32{cx, cy, cz}})
						}
					}
				}
				for live := true; live; {
					barrier := 0
					for _, th := range ths {
						if !th.done && th.run(e, pm, block, mem, shared) {
							barrier++
						}
					}
					if barrier != 0 && barrier != len(ths) {
						t.Fatalf("PTX: %d of %d threads at a bar.sync, the others returned", barrier, len(ths))
					}
					live = barrier != 0
				}
			}
		}
	}
}

// floats and their bytes.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// fillFloats is cudaprog.h's fill_floats.
func fillFloats(n int, seed uint32) []float32 {
	s := seed*2654435761 + 1
	v := make([]float32, n)
	for i := range v {
		s = s*1664525 + 1013904223
		v[i] = float32(int32(s>>8))*(1.0/1048576.0) - 8.0
	}
	return v
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestKernelsPTX interprets each kernel of the programs' PTX on inputs
// with a partial last block: vecAdd and scaleAdd touch exactly their n
// elements and round as Go's float32 does, matMulTiled over two tiles a
// side sums in the contract's order (acc + A[row][k]*B[k][col], k in order,
// each product and sum rounded), and empty runs.
func TestKernelsPTX(t *testing.T) {
	k := parsePTX(t, cModulePTX(t))
	const n = 1000 // not a multiple of 256: the last block's tail must not write
	a, b := fillFloats(n, 1), fillFloats(n, 2)
	guard := fillFloats(n+64, 3)
	mem := ptxMem{0x1000000: f32Bytes(a), 0x2000000: f32Bytes(b), 0x3000000: f32Bytes(guard)}
	ptxRun(t, k["vecAdd"], [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, []uint64{0x1000000, 0x2000000, 0x3000000, n}, mem)
	want := append(make([]float32, 0, n+64), guard...)
	for i := 0; i < n; i++ {
		want[i] = a[i] + b[i]
	}
	sameBits(t, "vecAdd c", bytesF32(mem[0x3000000]), want)

	y := append([]float32(nil), guard...)
	mem[0x3000000] = f32Bytes(y)
	const alpha = float32(0.8125)
	ptxRun(t, k["scaleAdd"], [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1},
		[]uint64{0x1000000, 0x3000000, uint64(math.Float32bits(alpha)), n}, mem)
	for i := 0; i < n; i++ {
		p := float32(alpha * a[i])
		y[i] = float32(p + y[i])
	}
	sameBits(t, "scaleAdd y", bytesF32(mem[0x3000000]), y)

	const m = 32 // 2×2 tiles
	A, B := fillFloats(m*m, 101), fillFloats(m*m, 102)
	mem = ptxMem{0x1000000: f32Bytes(A), 0x2000000: f32Bytes(B), 0x3000000: make([]byte, 4*m*m)}
	ptxRun(t, k["matMulTiled"], [3]uint32{m / 16, m / 16, 1}, [3]uint32{16, 16, 1}, []uint64{0x1000000, 0x2000000, 0x3000000, m}, mem)
	C := make([]float32, m*m)
	for row := 0; row < m; row++ {
		for col := 0; col < m; col++ {
			acc := float32(0)
			for i := 0; i < m; i++ {
				p := float32(A[row*m+i] * B[i*m+col])
				acc = float32(acc + p)
			}
			C[row*m+col] = acc
		}
	}
	sameBits(t, "matMulTiled C", bytesF32(mem[0x3000000]), C)

	ptxRun(t, k["empty"], [3]uint32{2, 1, 1}, [3]uint32{32, 1, 1}, nil, ptxMem{})
}
