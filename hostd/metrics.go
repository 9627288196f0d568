package hostd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/orchestrator"
)

// metrics are gmigd's Prometheus metrics (docs/operator-guide.md,
// "Metrics"), in a registry of the Host's own.
type metrics struct {
	once       sync.Once // the vGPU collector, registered on first use
	reg        *prometheus.Registry
	migrations *prometheus.CounterVec // by role and result
	inFlight   *prometheus.GaugeVec   // outgoing migrations by phase
	downtime   prometheus.Histogram
	guestGap   prometheus.Histogram
	stopPages  *prometheus.GaugeVec // by dirty source
}

// downtimeBuckets are the downtime histograms' upper bounds in seconds:
// 1 ms doubling to 16.384 s (15 buckets), so that the range a live
// migration's pause spans — a few ms with an idle guest (QEMU's own
// switchover, docs/benchmarks.md) to the seconds of a stop-and-copy of
// GiBs — falls inside with at most a factor of two per bucket.
var downtimeBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gmig_migrations_total",
			Help: "Migrations by role (source, destination) and result (started, ok, rolled_back, not_resumed, outcome_unknown, failed).",
		}, []string{"role", "result"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gmig_migrations_in_flight",
			Help: "Outgoing migrations in progress, by the orchestrator's phase (prepare, vgpu-precopy, vmm-precopy, stop, switchover, commit, done, rollback).",
		}, []string{"phase"}),
		downtime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gmig_migration_downtime_seconds",
			Help:    "Successful outgoing migrations' downtime, pause to resume on the host clocks.",
			Buckets: downtimeBuckets,
		}),
		guestGap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gmig_migration_guest_gap_seconds",
			Help:    "Successful outgoing migrations' guest-observed downtime (largest heartbeat gap; only migrations whose guest beats).",
			Buckets: downtimeBuckets,
		}),
		stopPages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gmig_last_stop_dirty_pages",
			Help: "Dirty graphics pages sent with the VM paused in the last successful outgoing migration, by how they were found.",
		}, []string{"source"}),
	}
	m.reg.MustRegister(m.migrations, m.inFlight, m.downtime, m.guestGap, m.stopPages, buildInfo(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// buildInfo is gmig_build_info: always 1, labelled with the module's
// version, the VCS revision it was built from (with "-dirty" when the
// tree had changes) and the Go version, as the binary records them
// (runtime/debug.ReadBuildInfo; "unknown" where it has none, as in tests).
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		dirty := ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if revision != "unknown" {
			revision += dirty
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gmig_build_info",
		Help:        "The gmigd binary: version, VCS revision and Go version (always 1).",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion},
	})
	g.Set(1)
	return g
}

// phaseTracker counts one outgoing migration in gmig_migrations_in_flight
// under the phase its progress last reported, from start to end.
type phaseTracker struct {
	g     *prometheus.GaugeVec
	mu    sync.Mutex
	phase string // "" once ended
}

// trackPhases counts a migration that starts now (phase prepare).
func (m *metrics) trackPhases() *phaseTracker {
	m.inFlight.WithLabelValues(orchestrator.PhasePrepare).Inc()
	return &phaseTracker{g: m.inFlight, phase: orchestrator.PhasePrepare}
}

// progress moves the migration to p's phase; it wraps next, the caller's
// own progress callback (nil: none).
func (t *phaseTracker) progress(next func(orchestrator.Progress)) func(orchestrator.Progress) {
	return func(p orchestrator.Progress) {
		t.mu.Lock()
		if t.phase != "" && p.Phase != "" && p.Phase != t.phase {
			t.g.WithLabelValues(t.phase).Dec()
			t.g.WithLabelValues(p.Phase).Inc()
			t.phase = p.Phase
		}
		t.mu.Unlock()
		if next != nil {
			next(p)
		}
	}
}

// end stops counting the migration.
func (t *phaseTracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != "" {
		t.g.WithLabelValues(t.phase).Dec()
		t.phase = ""
	}
}

func (m *metrics) migrationStarted(role string) {
	m.migrations.WithLabelValues(role, "started").Inc()
}

func (m *metrics) migrationEnded(role string, rep orchestrator.Report, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, orchestrator.ErrRolledBack):
		result = "rolled_back"
	case errors.Is(err, orchestrator.ErrNotResumed):
		result = "not_resumed"
	case errors.Is(err, orchestrator.ErrOutcomeUnknown):
		result = "outcome_unknown"
	default:
		result = "failed"
	}
	m.migrations.WithLabelValues(role, result).Inc()
	if err != nil || role != "source" {
		return
	}
	m.downtime.Observe(rep.Downtime.Seconds())
	if rep.GuestGap > 0 {
		m.guestGap.Observe(rep.GuestGap.Seconds())
	}
	for s, n := range rep.Precopy.Stop.BySource {
		m.stopPages.WithLabelValues(dirty.Source(s).String()).Set(float64(n))
	}
}

// vgpuCollector reports each vGPU's counters when scraped.
type vgpuCollector struct{ h *Host }

var (
	descFaults = prometheus.NewDesc("gmig_vgpu_faults_total", "Commands the vGPU refused or that faulted.", []string{"vgpu"}, nil)
	descFences = prometheus.NewDesc("gmig_vgpu_fences_total", "Fences the vGPU retired.", []string{"vgpu"}, nil)
	descBytes  = prometheus.NewDesc("gmig_vgpu_engine_written_bytes_total", "Graphics-memory bytes the vGPU's engine wrote.", []string{"vgpu"}, nil)
)

func (c vgpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFaults
	ch <- descFences
	ch <- descBytes
}

func (c vgpuCollector) Collect(ch chan<- prometheus.Metric) {
	for _, i := range c.h.List() {
		ch <- prometheus.MustNewConstMetric(descFaults, prometheus.CounterValue, float64(i.Stats.Faults), i.Name)
		ch <- prometheus.MustNewConstMetric(descFences, prometheus.CounterValue, float64(i.Stats.Fences), i.Name)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(i.Stats.BytesWritten), i.Name)
	}
}

// MetricsHandler serves the Prometheus metrics.
func (h *Host) MetricsHandler() http.Handler {
	h.metrics.once.Do(func() { h.metrics.reg.MustRegister(vgpuCollector{h}) })
	return promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{})
}

// ServeMetrics serves /metrics on addr until ctx ends.
func (h *Host) ServeMetrics(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("hostd: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h.MetricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	h.log.Info().Str("addr", l.Addr().String()).Msg("metrics listening")
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("hostd: metrics: %w", err)
	}
	return nil
}
