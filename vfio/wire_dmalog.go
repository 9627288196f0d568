package vfio

// Wire structs of the DMA logging features (vfio-user.rst,
// "VFIO_DEVICE_FEATURE_DMA_LOGGING_START / VFIO_DEVICE_FEATURE_DMA_LOGGING_STOP"
// and "VFIO_DEVICE_FEATURE_DMA_LOGGING_REPORT"; linux/vfio.h struct
// vfio_device_feature_dma_logging_control, _range and _report). vfio-user
// carries in the message what the kernel's structs point to: the ranges
// follow the control struct, the bitmap follows the report struct.

// Sizes of the DMA logging structs (the specification's tables).
const (
	DMALoggingControlSize = 16
	DMALoggingRangeSize   = 16
	DMALoggingReportSize  = 24
)

// DMALoggingControl mirrors struct vfio_device_feature_dma_logging_control
// less its ranges pointer: the data of a DMA_LOGGING_START SET, followed by
// NumRanges DMALoggingRange (zero: log every write).
type DMALoggingControl struct {
	PageSize  uint64 // a hint; the reply carries the page size chosen
	NumRanges uint32
	Reserved  uint32
}

func (m DMALoggingControl) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.PageSize)
	b = ne.AppendUint32(b, m.NumRanges)
	return ne.AppendUint32(b, m.Reserved)
}

func DecodeDMALoggingControl(b []byte) (DMALoggingControl, error) {
	if len(b) < DMALoggingControlSize {
		return DMALoggingControl{}, errShort("dma logging control", DMALoggingControlSize, len(b))
	}
	return DMALoggingControl{PageSize: ne.Uint64(b[0:]), NumRanges: ne.Uint32(b[8:]), Reserved: ne.Uint32(b[12:])}, nil
}

// DMALoggingRange mirrors struct vfio_device_feature_dma_logging_range: an
// IOVA range whose device writes are logged.
type DMALoggingRange struct {
	IOVA   uint64
	Length uint64
}

func (m DMALoggingRange) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.IOVA)
	return ne.AppendUint64(b, m.Length)
}

func DecodeDMALoggingRange(b []byte) (DMALoggingRange, error) {
	if len(b) < DMALoggingRangeSize {
		return DMALoggingRange{}, errShort("dma logging range", DMALoggingRangeSize, len(b))
	}
	return DMALoggingRange{IOVA: ne.Uint64(b[0:]), Length: ne.Uint64(b[8:])}, nil
}

// DMALoggingReport mirrors struct vfio_device_feature_dma_logging_report
// less its bitmap pointer: the data of a DMA_LOGGING_REPORT GET; the reply
// repeats it followed by the bitmap, u64 words in which bit i (word i/64,
// bit i%64) stands for [IOVA+i*PageSize, IOVA+(i+1)*PageSize).
type DMALoggingReport struct {
	IOVA     uint64
	Length   uint64
	PageSize uint64
}

func (m DMALoggingReport) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.IOVA)
	b = ne.AppendUint64(b, m.Length)
	return ne.AppendUint64(b, m.PageSize)
}

func DecodeDMALoggingReport(b []byte) (DMALoggingReport, error) {
	if len(b) < DMALoggingReportSize {
		return DMALoggingReport{}, errShort("dma logging report", DMALoggingReportSize, len(b))
	}
	return DMALoggingReport{IOVA: ne.Uint64(b[0:]), Length: ne.Uint64(b[8:]), PageSize: ne.Uint64(b[16:])}, nil
}
