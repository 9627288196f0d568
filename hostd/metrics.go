package hostd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	downtime   prometheus.Gauge
	guestGap   prometheus.Gauge
	stopPages  *prometheus.GaugeVec // by dirty source
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gmig_migrations_total",
			Help: "Migrations by role (source, destination) and result (started, ok, rolled_back, not_resumed, outcome_unknown, failed).",
		}, []string{"role", "result"}),
		downtime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gmig_last_downtime_seconds",
			Help: "The last successful outgoing migration's downtime, pause to resume on the host clocks.",
		}),
		guestGap: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gmig_last_guest_gap_seconds",
			Help: "The last successful outgoing migration's guest-observed downtime (largest heartbeat gap).",
		}),
		stopPages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gmig_last_stop_dirty_pages",
			Help: "Dirty graphics pages sent with the VM paused in the last successful outgoing migration, by how they were found.",
		}, []string{"source"}),
	}
	m.reg.MustRegister(m.migrations, m.downtime, m.guestGap, m.stopPages)
	return m
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
	m.downtime.Set(rep.Downtime.Seconds())
	m.guestGap.Set(rep.GuestGap.Seconds())
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
