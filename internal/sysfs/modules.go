package sysfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// moduleInitCompressedFile asks finit_module to decompress the module
// (include/uapi/linux/module.h, MODULE_INIT_COMPRESSED_FILE).
const moduleInitCompressedFile = 4

// LoadModule loads a kernel module file (plain or compressed .ko.xz/.ko.zst)
// with finit_module, with params ("name=value name=value", "" for none) as
// its module parameters. A module that is already loaded is not an error
// (and keeps the parameters it was loaded with).
func LoadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sysfs: %w", err)
	}
	defer f.Close()
	flags := 0
	if strings.HasSuffix(path, ".xz") || strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".gz") {
		flags = moduleInitCompressedFile
	}
	if err := unix.FinitModule(int(f.Fd()), params, flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("sysfs: loading %s: %w", filepath.Base(path), err)
	}
	return nil
}

// ModuleName is a module file's name without directory and .ko suffix
// ("kernel/drivers/vfio/pci/vfio-pci.ko.xz" -> "vfio-pci").
func ModuleName(file string) string {
	name, _, _ := strings.Cut(filepath.Base(file), ".ko")
	return name
}

// ModuleDeps maps a module's name (ModuleName) to the names of the modules
// it needs loaded first.
type ModuleDeps map[string][]string

// ErrModuleDeps reports a modules.dep that does not describe a loadable set
// of modules.
var ErrModuleDeps = errors.New("sysfs: module dependencies")

// ParseModuleDeps reads depmod's modules.dep format: one line per module,
// "path: dep-path dep-path ...". Paths may be relative to any directory;
// only their file names count.
func ParseModuleDeps(r io.Reader) (ModuleDeps, error) {
	deps := ModuleDeps{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		mod, rest, ok := strings.Cut(text, ":")
		if !ok || strings.TrimSpace(mod) == "" {
			return nil, fmt.Errorf("%w: line %d: %q is not \"module: deps\"", ErrModuleDeps, n, text)
		}
		name := ModuleName(strings.TrimSpace(mod))
		if _, dup := deps[name]; dup {
			return nil, fmt.Errorf("%w: line %d: %s listed twice", ErrModuleDeps, n, name)
		}
		list := []string{}
		for _, d := range strings.Fields(rest) {
			list = append(list, ModuleName(d))
		}
		deps[name] = list
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sysfs: reading modules.dep: %w", err)
	}
	return deps, nil
}

// LoadOrder returns the modules that loading want needs, each after every
// module it depends on, want's own order kept where dependencies allow. A
// module missing from deps or a dependency cycle is an error.
func (deps ModuleDeps) LoadOrder(want ...string) ([]string, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var order []string
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%w: cycle %s -> %s", ErrModuleDeps, strings.Join(path, " -> "), name)
		}
		list, ok := deps[name]
		if !ok {
			if len(path) > 0 {
				return fmt.Errorf("%w: %s (needed by %s) is not listed", ErrModuleDeps, name, path[len(path)-1])
			}
			return fmt.Errorf("%w: %s is not listed", ErrModuleDeps, name)
		}
		state[name] = visiting
		for _, d := range list {
			if err := visit(d, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = done
		order = append(order, name)
		return nil
	}
	for _, w := range want {
		if err := visit(w, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// ModuleSet is a directory of module files with a modules.dep describing
// them (what the guest image carries).
type ModuleSet struct {
	Dir  string
	Deps ModuleDeps
	// files maps a module's name to its file in Dir.
	files map[string]string
}

// OpenModuleSet reads dir/modules.dep and finds each listed module's file
// (NAME.ko, NAME.ko.xz, ...) in dir.
func OpenModuleSet(dir string) (*ModuleSet, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	defer f.Close()
	deps, err := ParseModuleDeps(f)
	if err != nil {
		return nil, err
	}
	s := &ModuleSet{Dir: dir, Deps: deps, files: map[string]string{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".ko") {
			s.files[ModuleName(e.Name())] = filepath.Join(dir, e.Name())
		}
	}
	return s, nil
}

// Has reports whether the set has module name and every module it needs.
func (s *ModuleSet) Has(name string) bool {
	order, err := s.Deps.LoadOrder(name)
	if err != nil {
		return false
	}
	for _, m := range order {
		if s.files[m] == "" {
			return false
		}
	}
	return true
}

// Load loads want and what it depends on, in dependency order; params maps
// a module's name to its parameter string. It returns the modules in the
// order it loaded them.
func (s *ModuleSet) Load(params map[string]string, want ...string) ([]string, error) {
	order, err := s.Deps.LoadOrder(want...)
	if err != nil {
		return nil, err
	}
	for i, m := range order {
		file := s.files[m]
		if file == "" {
			return order[:i], fmt.Errorf("sysfs: module %s: no file in %s", m, s.Dir)
		}
		if err := LoadModule(file, params[m]); err != nil {
			return order[:i], err
		}
	}
	return order, nil
}
