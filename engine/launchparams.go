package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// execLaunchParams runs LAUNCH_PARAMS (docs/device-abi.md §6.9, ABI 1.2):
// a guest module with a parameter buffer read from graphics memory, which
// must be exactly as long as the module's PTX says its parameters are (the
// layout read once per module, as for LAUNCH_GRID).
func (e *Engine) execLaunchParams(c LaunchParams) result {
	if r, ok := e.checkModuleLaunch("LAUNCH_PARAMS", c.Handle, c.Params, c.Len); !ok {
		return r
	}
	params := make([]byte, c.Len)
	if c.Len > 0 {
		xs, err := e.resolve(c.Params, uint64(c.Len), false)
		if err != nil {
			return fail(abi.ErrPageFault, err)
		}
		if err := e.cfg.Backend.Read(params, xs); err != nil {
			return e.backendFail(err, nil)
		}
	}
	if c.Threads == 0 {
		return result{}
	}
	xs, err := e.cfg.Backend.LaunchModuleParams(c.Handle, c.Threads, params)
	if err != nil {
		r := fail(abi.ErrKernel, fmt.Errorf("engine: %s back end: %w", e.cfg.Backend.Name(), err))
		r.wrote = xs
		return r
	}
	return result{wrote: xs}
}
