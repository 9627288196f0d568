package qemu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/apilog"
)

// frontEndWrites is a front end's replay as a guest's driver leaves it
// (BAR sizing, then the BARs, the interrupt line, cache line and latency,
// decoding on last): nine config writes, like a vGPU's.
var frontEndWrites = []apilog.Entry{
	{Kind: apilog.ConfigWrite, Offset: 0x04, Size: 2, Arg: 0x0000},
	{Kind: apilog.ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xffffffff},
	{Kind: apilog.ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xfebf0000},
	{Kind: apilog.ConfigWrite, Offset: 0x14, Size: 4, Arg: 0xffffffff},
	{Kind: apilog.ConfigWrite, Offset: 0x14, Size: 4, Arg: 0xc000},
	{Kind: apilog.ConfigWrite, Offset: 0x0c, Size: 1, Arg: 0x10},
	{Kind: apilog.ConfigWrite, Offset: 0x0d, Size: 1, Arg: 0x20},
	{Kind: apilog.ConfigWrite, Offset: 0x3c, Size: 1, Arg: 0x0b},
	{Kind: apilog.ConfigWrite, Offset: 0x04, Size: 2, Arg: 0x0003},
}

// TestRestoreFrontEndTimes restores a front end into a real QEMU (TCG,
// paused, QEMU's pci-testdev standing in for the vGPU under its id) on
// each machine type, the way gmigd did before the second monitor
// (query-pci and one main-monitor round trip per port access) and the
// way it does now (address and readline HMP monitor prepared before the
// downtime, two batches of lines in it), alternately on one QEMU, and
// logs both times. Both leave the BARs decoded where the writes put them,
// the command register set and CONFIG_ADDRESS as it was; a QEMU without
// the HMP monitor falls back to the main monitor and says so once. It needs the
// provisioned QEMU root (GMIG_CACHE).
func TestRestoreFrontEndTimes(t *testing.T) {
	root := needRoot(t)
	for _, machine := range []string{"pc", "q35"} {
		t.Run(machine, func(t *testing.T) {
			run := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(run, 0o700); err != nil {
				t.Fatal(err)
			}
			out, logs := &syncBuffer{}, &syncBuffer{}
			vm, err := Start(t.Context(), Config{
				Spec: Spec{Machine: machine, Accel: "tcg", MemoryMB: 64, Extra: []string{"-device", "pci-testdev,id=" + DeviceID}},
				Root: root, RunDir: run, Serial: out, Incoming: true, Log: zerolog.New(logs),
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Cleanup(vm.Kill)

			const iterations = 20
			var before, after []time.Duration
			for i := range iterations {
				// The guest was mid-access: CONFIG_ADDRESS must come back.
				guestAddr := uint32(0x80000800 + 4*i)
				hmp(t, vm, "o /w 0xcf8 %#x", guestAddr)
				vm.fe.mu.Lock()
				vm.fe.bdfKnown = false // the old path asked query-pci each time
				vm.fe.mu.Unlock()
				start := time.Now()
				if err := vm.restoreFrontEnd(frontEndWrites, portIO{vm: vm}); err != nil {
					t.Fatalf("serial restore %d: %v", i, err)
				}
				before = append(before, time.Since(start))
				checkFrontEnd(t, vm, guestAddr)

				guestAddr += 0x100
				hmp(t, vm, "o /w 0xcf8 %#x", guestAddr)
				if err := vm.PrepareFrontEnd(); err != nil {
					t.Fatalf("preparing restore %d: %v", i, err)
				}
				start = time.Now()
				if err := vm.RestoreFrontEnd(frontEndWrites); err != nil {
					t.Fatalf("HMP monitor restore %d: %v", i, err)
				}
				after = append(after, time.Since(start))
				checkFrontEnd(t, vm, guestAddr)
			}
			slices.Sort(before)
			slices.Sort(after)
			t.Logf("%s: front-end restore of %d config writes over %d runs: serial (query-pci + a round trip per access) median %v min %v; "+
				"prepared + readline HMP monitor median %v min %v", machine, len(frontEndWrites), iterations,
				before[iterations/2], before[0], after[iterations/2], after[0])
			if strings.Contains(logs.String(), "main QMP monitor") {
				t.Errorf("the fallback was logged with the HMP monitor there:\n%s", logs)
			}

			// A QEMU without the HMP monitor (as an older gmigd started
			// it): the main monitor does it all, said once.
			if err := os.Remove(filepath.Join(run, HMPSocket)); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				hmp(t, vm, "o /w 0xcf8 0x80000000")
				if err := vm.RestoreFrontEnd(frontEndWrites); err != nil {
					t.Fatalf("restore without the HMP monitor: %v", err)
				}
				checkFrontEnd(t, vm, 0x80000000)
			}
			if n := strings.Count(logs.String(), "main QMP monitor"); n != 1 {
				t.Errorf("the fallback logged %d times, want once:\n%s", n, logs)
			}
		})
	}
}

// hmp runs an HMP command line on the main monitor.
func hmp(t *testing.T, vm *VM, format string, args ...any) string {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	out, err := vm.HMP(line)
	if err != nil {
		t.Fatalf("HMP %q: %v", line, err)
	}
	return out
}

// checkFrontEnd checks what frontEndWrites leave: QEMU maps the BARs
// where they say (it does once decoding is on), and CONFIG_ADDRESS holds
// the guest's value again.
func checkFrontEnd(t *testing.T, vm *VM, guestAddr uint32) {
	t.Helper()
	raw, err := vm.QMP("query-pci", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buses []struct {
		Devices []struct {
			QdevID  string `json:"qdev_id"`
			Regions []struct {
				Bar     int   `json:"bar"`
				Address int64 `json:"address"`
			} `json:"regions"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(raw, &buses); err != nil {
		t.Fatal(err)
	}
	bars := map[int]int64{}
	for _, b := range buses {
		for _, d := range b.Devices {
			if d.QdevID == DeviceID {
				for _, r := range d.Regions {
					bars[r.Bar] = r.Address
				}
			}
		}
	}
	if bars[0] != 0xfebf0000 || bars[1] != 0xc000 {
		t.Fatalf("BARs after the restore: %#x, want 0: 0xfebf0000, 1: 0xc000", bars)
	}
	if got := portRE.FindString(hmp(t, vm, "i /w 0xcf8")); got != fmt.Sprintf("= %#x", guestAddr) {
		t.Fatalf("CONFIG_ADDRESS after the restore: %q, want %#x", got, guestAddr)
	}
}
