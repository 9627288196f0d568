package tests

import (
	"context"
	"encoding/binary"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/pci"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// MSIExtra is what a VM needs on its QEMU command line (qemu.Spec.Extra)
// for the guest program's MSI mode (gmig.irq=msi) with the Debian kernel:
// a virtual IOMMU. The guest takes MSI through vfio-pci, which only takes a
// device in an IOMMU group, and Debian builds vfio without its no-IOMMU
// mode (CONFIG_VFIO_NOIOMMU), so without an IOMMU vfio-pci refuses the
// vGPU. virtio-iommu works on both pc and q35; the guest maps its DMA
// memory at I/O addresses equal to its physical addresses, so nothing else
// changes for the device.
var MSIExtra = []string{"-device", "virtio-iommu-pci"}

// TestGuestMSI boots the guest program with gmig.irq=msi on both machine
// types gmigd supports: the measurements, the correctness suite by polling
// and by MSI, and a short workload whose interrupt waits use MSI. The guest
// reports the mode and how many MSIs it took; the vGPU's config space
// (and the config writes a migration replays) show MSI enabled.
func TestGuestMSI(t *testing.T) {
	e := needEnv(t)
	for _, machine := range []string{"pc", "q35"} {
		t.Run(machine, func(t *testing.T) { testGuestMSI(t, e, machine) })
	}
}

func testGuestMSI(t *testing.T, e env, machine string) {
	runDir := t.TempDir()
	h, err := hostd.New(hostd.Config{PoolSize: 32 << 20, RunDir: runDir, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var hb heartbeats
	info, err := h.Create(vgpu.Config{Name: "gpu0", MemSize: 16 << 20, OnHeartbeat: hb.record})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.VGPU("gpu0")
	if err != nil {
		t.Fatal(err)
	}
	con := newConsole(t)
	// The host's view is sampled while the guest runs with MSI enabled
	// (it disables MSI when it closes the device, before powering off).
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout())
	defer cancel()
	sampled := make(chan msiState, 1)
	go func() {
		for {
			select {
			case l := <-con.seen:
				if strings.Contains(l, "gmig: suite (interrupts): PASS fence-interrupt") {
					sampled <- sampleMSI(v)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	start := time.Now()
	e.runGuest(ctx, t, e.guestSpec(machine, "gmig.irq=msi gmig.measure=200 gmig.steps=300 gmig.seed=7", MSIExtra), info.Socket, runDir, con)
	t.Logf("whole run %s", time.Since(start).Round(time.Millisecond))

	lines := map[string]bool{}
	var result, counts string
	for _, l := range con.gmigLines() {
		t.Log(l.text)
		lines[l.text] = true
		switch {
		case strings.HasPrefix(l.text, "result "):
			result = l.text
		case strings.HasPrefix(l.text, "interrupts msi: "):
			counts = l.text
		}
	}
	if result != "result ok" {
		con.dump()
		t.Fatalf("guest reported %q", result)
	}
	for _, want := range []string{"interrupts msi", "suite (interrupts): PASS fence-interrupt", "suite (interrupts): PASS dma-to-gfx"} {
		if !hasPrefix(lines, want) {
			t.Errorf("no line %q", want)
		}
	}
	if !hasMatch(lines, `^suite \(interrupts\): \d+ passed, 0 failed`) {
		t.Error("the suite by interrupts did not pass")
	}
	if !hasMatch(lines, `^vfio group /dev/vfio/\d+ iommu type1`) {
		t.Error("no vfio group line")
	}
	// The guest took MSIs and its kernel counted them as vfio's MSI vector.
	m := regexp.MustCompile(`^interrupts msi: program (\d+), kernel (\d+) \(.*vfio-msi`).FindStringSubmatch(counts)
	if m == nil {
		t.Fatalf("MSI counts: %q", counts)
	}
	prog, _ := strconv.Atoi(m[1])
	kern, _ := strconv.Atoi(m[2])
	if prog == 0 || kern == 0 {
		t.Errorf("MSIs: program %d, kernel %d", prog, kern)
	}
	// Heartbeats are not asserted: with MSI the aperture stays mapped and
	// the workload takes well under a second, too short for a count.
	n, gap := hb.maxGap()
	t.Logf("%d heartbeats, largest gap %s", n, gap.Round(time.Microsecond))

	// The host's side, mid-run: the vGPU's config space has MSI enabled
	// with the message the guest kernel programmed, and the config writes
	// a migration would replay carry it.
	var st msiState
	select {
	case st = <-sampled:
	default:
		t.Fatal("the host never sampled the vGPU's MSI state")
	}
	t.Logf("vGPU mid-run: MSI control %#04x address %#x data %#04x; MSI enable among %d config writes: %v",
		st.control, st.addr, st.data, st.writes, st.logged)
	if st.control&pci.MSIControlEnable == 0 || st.addr&0xfff00000 != 0xfee00000 {
		t.Errorf("vGPU config: MSI control %#x address %#x, want enabled towards the local APIC (0xfeexxxxx)", st.control, st.addr)
	}
	if !st.logged {
		t.Error("the config writes carry no MSI enable")
	}
	if st := v.Stats(); st.Fences == 0 {
		t.Errorf("device stats %+v", st)
	}
}

// msiState is the host's view of a vGPU's MSI capability.
type msiState struct {
	control uint16
	addr    uint32
	data    uint16
	writes  int  // config writes recorded for replay
	logged  bool // one of them enables MSI
}

func sampleMSI(v *vgpu.VGPU) msiState {
	var st msiState
	var b [4]byte
	if v.ReadRegion(vfio.PCIConfigRegionIndex, pci.OffMSIControl, b[:2]) == nil {
		st.control = binary.LittleEndian.Uint16(b[:2])
	}
	if v.ReadRegion(vfio.PCIConfigRegionIndex, pci.OffMSIAddrLo, b[:]) == nil {
		st.addr = binary.LittleEndian.Uint32(b[:])
	}
	if v.ReadRegion(vfio.PCIConfigRegionIndex, pci.OffMSIData, b[:2]) == nil {
		st.data = binary.LittleEndian.Uint16(b[:2])
	}
	ws := v.ConfigWrites()
	st.writes = len(ws)
	for _, w := range ws {
		if w.Offset == pci.OffMSIControl && w.Arg&pci.MSIControlEnable != 0 {
			st.logged = true
		}
	}
	return st
}

func hasPrefix(lines map[string]bool, prefix string) bool {
	for l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func hasMatch(lines map[string]bool, re string) bool {
	r := regexp.MustCompile(re)
	for l := range lines {
		if r.MatchString(l) {
			return true
		}
	}
	return false
}
