package sim

import "sync"

// Registry holds the simulated VMs of one process by name, so a
// destination host in the same process can find the VM a source migrates
// (the VM spec of a "sim" migration is its name).
type Registry struct {
	mu  sync.Mutex
	vms map[string]*VM
}

// Put registers vm under name.
func (r *Registry) Put(name string, vm *VM) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.vms == nil {
		r.vms = map[string]*VM{}
	}
	r.vms[name] = vm
}

// Get returns the VM registered under name.
func (r *Registry) Get(name string) (*VM, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vm, ok := r.vms[name]
	return vm, ok
}
