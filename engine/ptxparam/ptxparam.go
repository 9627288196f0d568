// Package ptxparam reads a PTX kernel's parameter list — the
// `.entry name(.param .u64 a, ...)` declaration — and lays the parameters
// out as the CUDA driver does in a kernel's parameter buffer (what
// cuFuncGetParamInfo reports and CU_LAUNCH_PARAM_BUFFER_POINTER takes):
// each parameter at the next offset aligned to its alignment. The device
// checks a LAUNCH_PARAMS buffer against it (docs/device-abi.md §6.9); a
// guest CUDA library builds the buffer from cuLaunchKernel's kernelParams
// with the same layout. It is a leaf: it imports nothing of gmig.
//
// Sources: the PTX ISA (docs.nvidia.com/cuda/parallel-thread-execution),
// §5.1 "Fundamental types" for the sizes (.b8/.u8/.s8 1 byte, 16-bit 2,
// 32-bit 4, 64-bit 8), §5.4.6 "Parameter state space" for
// `.param [.align N] .type name[n]` and the default alignment (the type's
// size).
package ptxparam

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrPTX is wrapped by every refusal: no such entry, or a parameter list
// this package does not read.
var ErrPTX = errors.New("ptxparam: cannot read the kernel's parameters")

// Param is one kernel parameter in the buffer.
type Param struct {
	Name   string
	Offset uint32 // bytes from the buffer's start
	Size   uint32 // bytes
	Align  uint32
}

// Layout is a kernel's parameters in order and the buffer's size (the end
// of the last one; 0 for a kernel without parameters).
type Layout struct {
	Params []Param
	Size   uint32
}

// MaxParams bounds the parameter count read, against hostile PTX; the CUDA
// driver's own limit is far larger (the buffer size bounds it there).
const MaxParams = 1024

// typeSizes are PTX fundamental types' sizes in bytes (PTX ISA §5.1).
var typeSizes = map[string]uint32{
	"b8": 1, "u8": 1, "s8": 1, "pred": 1,
	"b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
	"b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
	"b64": 8, "u64": 8, "s64": 8, "f64": 8,
}

var (
	// entryRE finds `.entry name (` (with `.visible` or `.weak` before it
	// or not).
	entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][A-Za-z0-9_$%]*)\s*\(`)
	// paramRE is one declaration: .param [.ptr...] [.align N] .type name[[n]].
	paramRE = regexp.MustCompile(`^\.param\s+(?:\.ptr(?:\.\w+)*\s+)?(?:\.align\s+(\d+)\s+)?(?:\.ptr(?:\.\w+)*\s+)?\.(\w+)\s+([A-Za-z_$%][A-Za-z0-9_$%]*)\s*(?:\[\s*(\d+)\s*\])?$`)
	// commentRE drops // and /* */ comments.
	commentRE = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
)

// Of returns the layout of entry's parameters in ptx.
func Of(ptx []byte, entry string) (Layout, error) {
	src := commentRE.ReplaceAllString(string(ptx), " ")
	list, err := paramList(src, entry)
	if err != nil {
		return Layout{}, err
	}
	var l Layout
	if strings.TrimSpace(list) == "" {
		return l, nil
	}
	decls := strings.Split(list, ",")
	if len(decls) > MaxParams {
		return Layout{}, fmt.Errorf("%w: %s has %d parameters (at most %d)", ErrPTX, entry, len(decls), MaxParams)
	}
	for _, d := range decls {
		p, err := parse(strings.Join(strings.Fields(d), " "))
		if err != nil {
			return Layout{}, fmt.Errorf("%w: %s: %w", ErrPTX, entry, err)
		}
		p.Offset = (l.Size + p.Align - 1) / p.Align * p.Align
		l.Size = p.Offset + p.Size
		l.Params = append(l.Params, p)
	}
	return l, nil
}

// paramList is the text between the parentheses of entry's declaration.
func paramList(src, entry string) (string, error) {
	for _, m := range entryRE.FindAllStringSubmatchIndex(src, -1) {
		if src[m[2]:m[3]] != entry {
			continue
		}
		end := strings.IndexByte(src[m[1]:], ')')
		if end < 0 {
			return "", fmt.Errorf("%w: %s's parameter list does not end", ErrPTX, entry)
		}
		return src[m[1] : m[1]+end], nil
	}
	return "", fmt.Errorf("%w: no .entry %s", ErrPTX, entry)
}

// parse reads one declaration, whitespace already collapsed.
func parse(d string) (Param, error) {
	m := paramRE.FindStringSubmatch(d)
	if m == nil {
		return Param{}, fmt.Errorf("parameter %q is not `.param [.align N] .type name[n]`", d)
	}
	size, ok := typeSizes[m[2]]
	if !ok {
		return Param{}, fmt.Errorf("parameter %q has unknown type .%s", d, m[2])
	}
	p := Param{Name: m[3], Size: size, Align: size}
	if m[1] != "" {
		a, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil || a == 0 || a&(a-1) != 0 || a > 256 {
			return Param{}, fmt.Errorf("parameter %q: alignment %s is not a power of two up to 256", d, m[1])
		}
		p.Align = uint32(a)
	}
	if m[4] != "" {
		n, err := strconv.ParseUint(m[4], 10, 32)
		if err != nil || n == 0 || n > 1<<16 {
			return Param{}, fmt.Errorf("parameter %q: array length %s out of range", d, m[4])
		}
		p.Size *= uint32(n)
	}
	return p, nil
}
