package hostd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/nvml"
	"github.com/gmig-dev/gmig/vgpu"
)

// The GPU a gmigd runs its cuda vGPUs on (Config.GPU, gmigd serve -gpu;
// docs/nvidia.md, "Choosing the GPU"), and who owns which GPU of the host.
const (
	// GPUNone is the Config.GPU of a gmigd without a GPU: it refuses cuda
	// vGPUs, created or arriving.
	GPUNone = "none"
	// DefaultGPULockDir holds one lock file per GPU a gmigd owns,
	// UUID.lock, flocked for that gmigd's life and holding its pid and
	// run directory (gpuOwner). Every gmigd of the host must use the
	// same directory (gmigd serve's default).
	DefaultGPULockDir = "/run/gmig-gpus"
)

// Errors of choosing and owning a GPU.
var (
	// ErrNoGPU: the GPU asked for is not on this host (or CUDA does not
	// see it), or this gmigd has none (-gpu none) for a cuda vGPU.
	ErrNoGPU = errors.New("hostd: no such GPU")
	// ErrGPUInUse: another gmigd owns the GPU asked for.
	ErrGPUInUse = errors.New("hostd: GPU is owned by another gmigd")
)

// GPUOwner is the gmigd that holds a GPU's lock, as it wrote it there.
type GPUOwner struct {
	PID    int    `json:"pid"`
	RunDir string `json:"run_dir"`
}

// GPU is one GPU of the host.
type GPU struct {
	// Index is NVML's index (nvidia-smi's), where NVML lists the GPUs;
	// else (no NVML, or the model of a GPU) CUDA's ordinal.
	Index int `json:"index"`
	// CUDAOrdinal is the GPU's ordinal for CUDA in this process, matched
	// by UUID (it need not be Index); -1 where CUDA does not see it.
	CUDAOrdinal int    `json:"cuda_ordinal"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryTotal uint64 `json:"memory_total"` // bytes
	// Owner is the gmigd that owns it (nil: none, or no lock directory).
	Owner *GPUOwner `json:"owner,omitempty"`
}

// GPUReport lists the host's GPUs with their owners.
type GPUReport struct {
	// Source is where the list and its indices come from: "nvml",
	// "cuda" (no NVML), "model" (GMIG_CUDA_MODEL) or "" (no GPU).
	Source string `json:"source"`
	// Reason says why the list is empty or lacks something.
	Reason  string `json:"reason,omitempty"`
	LockDir string `json:"lock_dir,omitempty"`
	GPUs    []GPU  `json:"gpus"`
	// Chosen is the GPU of the gmigd that answers (the control API's
	// GET /v1/gpus); nil for one without.
	Chosen *GPU `json:"chosen,omitempty"`
}

// GPUs lists the host's GPUs and, from the lock files in lockDir (none
// when empty), the gmigd that owns each.
func GPUs(lockDir string) GPUReport {
	r := gpuTable()
	r.LockDir = lockDir
	if lockDir == "" {
		return r
	}
	for i := range r.GPUs {
		o, err := gpuOwnerOf(lockDir, r.GPUs[i].UUID)
		if err != nil {
			r.Reason = joinReason(r.Reason, err.Error())
		}
		r.GPUs[i].Owner = o
	}
	return r
}

// gpuTable lists the GPUs: NVML's, each with its CUDA ordinal, where NVML
// is there; CUDA's where only CUDA is; the model's under GMIG_CUDA_MODEL.
func gpuTable() GPUReport {
	devs, cerr := nvidia.Devices()
	var r GPUReport
	fromCUDA := func(source string) {
		r.Source = source
		for _, d := range devs {
			r.GPUs = append(r.GPUs, GPU{Index: d.Ordinal, CUDAOrdinal: d.Ordinal, UUID: d.UUID, Name: d.Name, MemoryTotal: d.TotalMem})
		}
	}
	if nvidia.Modelled() {
		fromCUDA("model")
		return r
	}
	inv := nvml.Inventory()
	switch {
	case inv.Available:
		r.Source = "nvml"
		for _, g := range inv.GPUs {
			ord, ok := nvidia.FindUUID(devs, g.UUID)
			if !ok {
				ord = -1
			}
			r.GPUs = append(r.GPUs, GPU{Index: g.Index, CUDAOrdinal: ord, UUID: g.UUID, Name: g.Name, MemoryTotal: g.MemoryTotal})
		}
		if inv.Reason != "" {
			r.Reason = "NVML: " + inv.Reason
		}
	case cerr == nil:
		fromCUDA("cuda")
		r.Reason = "NVML: " + inv.Reason + "; indices are CUDA's ordinals"
		return r
	default:
		r.Reason = "NVML: " + inv.Reason
	}
	if cerr != nil {
		r.Reason = joinReason(r.Reason, "CUDA: "+cerr.Error())
	}
	return r
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// describeGPUs names the GPUs of r for an error message.
func describeGPUs(r GPUReport) string {
	if len(r.GPUs) == 0 {
		return "this host has no GPU (" + r.Reason + ")"
	}
	var s []string
	for _, g := range r.GPUs {
		s = append(s, fmt.Sprintf("%d (%s, %s)", g.Index, g.UUID, g.Name))
	}
	return "this host has GPU " + strings.Join(s, ", GPU ")
}

// chooseGPU finds sel in r: "" is CUDA's first GPU (ordinal 0, what the
// cuda back end has always used), a number an Index, anything else a
// UUID. A GPU not there, or that CUDA does not see, is ErrNoGPU naming
// those that are.
func chooseGPU(sel string, r GPUReport) (GPU, error) {
	match := func(g GPU) bool { return strings.EqualFold(g.UUID, sel) }
	what := fmt.Sprintf("GPU %q", sel)
	if sel == "" {
		match, what = func(g GPU) bool { return g.CUDAOrdinal == 0 }, "CUDA's first GPU"
	} else if n, err := strconv.Atoi(sel); err == nil {
		match, what = func(g GPU) bool { return g.Index == n }, fmt.Sprintf("GPU %d", n)
	}
	for _, g := range r.GPUs {
		if !match(g) {
			continue
		}
		if g.CUDAOrdinal < 0 {
			return GPU{}, fmt.Errorf("%w: %s (%s) is not visible to CUDA in this process (CUDA_VISIBLE_DEVICES?); %s", ErrNoGPU, what, g.UUID, describeGPUs(r))
		}
		return g, nil
	}
	return GPU{}, fmt.Errorf("%w: %s; %s", ErrNoGPU, what, describeGPUs(r))
}

// ChooseGPU finds the GPU Config.GPU sel names, as New would (ErrNoGPU
// naming the host's GPUs if it is not there), without owning it.
func ChooseGPU(sel string) (GPU, error) { return chooseGPU(sel, gpuTable()) }

// uuidRE is what a GPU UUID may be to name a lock file.
var uuidRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,96}$`)

// gpuLockPath is GPU uuid's lock file in dir (uuid as NVML and
// cuda.FormatUUID write it).
func gpuLockPath(dir, uuid string) (string, error) {
	if !uuidRE.MatchString(uuid) {
		return "", fmt.Errorf("hostd: GPU UUID %q cannot name a lock file", uuid)
	}
	return filepath.Join(dir, uuid+".lock"), nil
}

// gpuOwnerOf reads the owner of GPU uuid from its lock file in dir.
func gpuOwnerOf(dir, uuid string) (*GPUOwner, error) {
	path, err := gpuLockPath(dir, uuid)
	if err != nil {
		return nil, err
	}
	holder, held, err := readLock(path)
	if err != nil || !held {
		return nil, err
	}
	var o GPUOwner
	if json.Unmarshal([]byte(holder), &o) != nil {
		return &GPUOwner{}, nil // held, not yet written
	}
	return &o, nil
}

// gpuInUse is ErrGPUInUse naming the GPU and its owner.
type gpuInUse struct {
	gpu   GPU
	owner GPUOwner
}

func (e gpuInUse) Error() string {
	return fmt.Sprintf("hostd: GPU %d (%s) is owned by another gmigd (run dir %s, pid %d); choose another with -gpu, or -gpu none",
		e.gpu.Index, e.gpu.UUID, e.owner.RunDir, e.owner.PID)
}

func (e gpuInUse) Is(target error) bool { return target == ErrGPUInUse }

// claimGPU chooses the host's GPU (Config.GPU) and, with a lock
// directory, takes its lock. The default, CUDA's first GPU, is no error
// where there is none: cuda vGPUs then fail as they would on GPU 0.
func (h *Host) claimGPU() error {
	sel := h.cfg.GPU
	if sel == GPUNone {
		h.log.Info().Msg("no GPU (-gpu none): cuda vGPUs are refused")
		return nil
	}
	r := gpuTable()
	g, err := chooseGPU(sel, r)
	if err != nil {
		if sel == "" && len(r.GPUs) == 0 {
			h.log.Info().Str("reason", r.Reason).Msg("no GPU here: cuda vGPUs will fail")
			return nil
		}
		return err
	}
	ev := h.log.Info().Int("index", g.Index).Int("cuda_ordinal", g.CUDAOrdinal).Str("uuid", g.UUID).Str("name", g.Name)
	if dir := h.cfg.GPULockDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("hostd: the GPU lock directory: %w", err)
		}
		path, err := gpuLockPath(dir, g.UUID)
		if err != nil {
			return err
		}
		runDir, err := filepath.Abs(h.cfg.RunDir)
		if err != nil {
			return fmt.Errorf("hostd: the run dir: %w", err)
		}
		me, _ := json.Marshal(GPUOwner{PID: os.Getpid(), RunDir: runDir})
		f, holder, err := takeLock(path, 0o644, append(me, '\n'))
		if errors.Is(err, errLockHeld) {
			var o GPUOwner
			_ = json.Unmarshal([]byte(holder), &o)
			return gpuInUse{gpu: g, owner: o}
		}
		if err != nil {
			return fmt.Errorf("hostd: the GPU's lock: %w", err)
		}
		h.gpuLock = f
		ev = ev.Str("lock", path)
	}
	h.gpu = &g
	ev.Msg("gpu chosen")
	return nil
}

// gpuFor puts a cuda vGPU of cfg on the host's GPU; a host without one
// (-gpu none) refuses it.
func (h *Host) gpuFor(cfg vgpu.Config) (vgpu.Config, error) {
	if cfg.Backend != vgpu.BackendCUDA {
		return cfg, nil
	}
	if h.cfg.GPU == GPUNone {
		return cfg, fmt.Errorf("%w: vGPU %s wants the %s back end and this gmigd has no GPU (-gpu none)", ErrNoGPU, cfg.Name, vgpu.BackendCUDA)
	}
	if h.gpu != nil {
		cfg.GPU = h.gpu.CUDAOrdinal
	}
	return cfg, nil
}

// GPUs lists the host's GPUs with their owners (from the lock directory
// this gmigd uses), and the one it runs cuda vGPUs on.
func (h *Host) GPUs() GPUReport {
	r := GPUs(h.cfg.GPULockDir)
	if h.gpu != nil {
		for i := range r.GPUs {
			if strings.EqualFold(r.GPUs[i].UUID, h.gpu.UUID) {
				r.Chosen = &r.GPUs[i]
			}
		}
	}
	return r
}

// releaseGPU lets go of the GPU's lock (the GPU is free for another gmigd).
func (h *Host) releaseGPU() {
	if h.gpuLock != nil {
		h.gpuLock.Close()
		h.gpuLock = nil
	}
}
