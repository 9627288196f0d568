package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"

	"github.com/gmig-dev/gmig/internal/sysfs"
)

// cudaLibraryPath is where the guest image puts libcuda.so.1 and the glibc
// libraries a CUDA program links (scripts/guest-image.sh).
const cudaLibraryPath = "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu"

// heartbeatDMA is the DMA memory the heartbeat's own mapping of the vGPU
// takes: one 2 MiB huge page, leaving the rest of the huge pages setupInit
// reserves to the program's libcuda.so.1 (sysfs's default 8 MiB).
const heartbeatDMA = 2 << 20

// cudaProgram runs the CUDA program o.cuda names (PROGRAM[,ARG...]) on the
// guest's libcuda.so.1, which drives the vGPU itself, and relays each line
// it writes (standard output and error) to the console. Meanwhile it writes
// HEARTBEAT every o.heartbeat through a mapping of BAR0 of its own, so the
// host can time the guest's pauses. It reports "cuda exit N" and is ok when
// the program exits 0.
func cudaProgram(o options) bool {
	argv := strings.Split(o.cuda, ",")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaLibraryPath)
	r, w, err := os.Pipe()
	if err != nil {
		report("cuda: %v", err)
		return false
	}
	cmd.Stdout, cmd.Stderr = w, w
	report("cuda: running %s", strings.Join(argv, " "))
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		report("cuda: starting %s: %v", argv[0], err)
		return false
	}
	stop := func() {}
	if o.heartbeat > 0 {
		bus, err := sysfs.Open(sysfs.Options{IRQ: sysfs.IRQNone, DMASize: heartbeatDMA})
		if err != nil {
			report("cuda: no heartbeat: %v", err)
		} else {
			defer bus.Close()
			stop = heartbeat(bus, o.heartbeat)
		}
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		report("%s", sc.Text())
	}
	r.Close()
	err = cmd.Wait()
	stop()
	report("cuda exit %d", cmd.ProcessState.ExitCode())
	return err == nil
}
