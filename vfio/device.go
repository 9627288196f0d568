package vfio

import "os"

// Device is the PCI device a Server hosts. The server calls it from its one
// request goroutine, so calls never overlap; the device may still be touched
// by its own goroutines (an engine) and must lock for them.
//
// An error returned to the server becomes an error reply to the client: a
// syscall.Errno (possibly wrapped) is sent as is, anything else as EINVAL.
type Device interface {
	// Info describes the device (VFIO_DEVICE_GET_INFO).
	Info() DeviceInfo
	// RegionInfo describes region index (VFIO_DEVICE_GET_REGION_INFO).
	RegionInfo(index uint32) (RegionInfo, error)
	// IRQInfo describes interrupt index (VFIO_DEVICE_GET_IRQ_INFO).
	IRQInfo(index uint32) (IRQInfo, error)
	// ReadRegion fills p from region index at offset.
	ReadRegion(index uint32, offset uint64, p []byte) error
	// WriteRegion writes p to region index at offset.
	WriteRegion(index uint32, offset uint64, p []byte) error
	// Reset resets the device (VFIO_USER_DEVICE_RESET).
	Reset() error
}

// Migrator is what a Device implements to migrate through the protocol
// (VFIO_USER_DEVICE_FEATURE, VFIO_USER_MIG_DATA_READ/WRITE); the server finds
// it with a type assertion on the Device. A device without it answers those
// commands with ENOTSUP.
//
// The server keeps the FSM state (RUNNING at start and after a successful
// Reset, which must also return the device's own migration state to
// RUNNING), checks every request against it and calls the device once per
// arc, from its one request goroutine. An error from SetMigState leaves the
// state at from; one wrapping ErrMigStateLost, from any method, moves it to
// ERROR.
type Migrator interface {
	// MigrationFlags returns the Migration* flags, asked once by NewServer.
	// Without MigrationStopCopy the device does not migrate (ENOTSUP); the
	// server leaves out MigrationP2P (vfio-user does not use the P2P states).
	MigrationFlags() uint64
	// SetMigState takes one arc of the FSM (MigArc(from, to, flags) holds).
	SetMigState(from, to MigState) error
	// MigDataRead fills p with the next bytes of the device's migration data
	// in PRE_COPY or STOP_COPY. At the end of the STOP_COPY data it returns
	// 0, io.EOF; in PRE_COPY, 0 and no error means nothing more for now.
	MigDataRead(p []byte) (int, error)
	// MigDataWrite takes the next bytes of incoming migration data in
	// RESUMING; the arc RESUMING -> STOP checks the whole.
	MigDataWrite(p []byte) error
	// MigDataSize estimates the bytes STOP_COPY would produce now
	// (VFIO_DEVICE_FEATURE_MIG_DATA_SIZE).
	MigDataSize() (stopCopyBytes uint64)
}

// DeviceInfo mirrors struct vfio_device_info's payload fields.
type DeviceInfo struct {
	Flags      uint32 // DeviceFlag* bits
	NumRegions uint32
	NumIRQs    uint32
}

// RegionInfo describes one region. When File is set the region (or its
// Sparse areas) may be mmap'd by the client from File at Offset + area offset;
// the server passes File's descriptor with the reply.
//
// The server derives RegionFlagMmap (set exactly when File is set) and
// RegionFlagCaps (set when it sends the sparse-mmap capability) itself; the
// device's own values of those two bits are ignored. File stays the device's:
// the server never closes it. Sparse is only meaningful with File set.
type RegionInfo struct {
	Flags  uint32 // RegionFlag* bits
	Size   uint64
	File   *os.File
	Offset uint64
	Sparse []SparseArea // mmap-able parts; empty with File set = the whole region
}

// SparseArea mirrors struct vfio_region_sparse_mmap_area.
type SparseArea struct {
	Offset uint64
	Size   uint64
}

// IRQInfo mirrors struct vfio_irq_info's payload fields.
type IRQInfo struct {
	Flags uint32 // IRQInfoFlag* bits
	Count uint32
}

// Flags of DeviceInfo, RegionInfo and IRQInfo, from linux/vfio.h as the
// vfio-user specification reuses them ("VFIO_USER_DEVICE_GET_INFO",
// "VFIO_USER_DEVICE_GET_REGION_INFO", "VFIO_USER_DEVICE_GET_IRQ_INFO").
const (
	DeviceFlagReset = 1 << 0 // VFIO_DEVICE_FLAGS_RESET
	DeviceFlagPCI   = 1 << 1 // VFIO_DEVICE_FLAGS_PCI

	RegionFlagRead  = 1 << 0 // VFIO_REGION_INFO_FLAG_READ
	RegionFlagWrite = 1 << 1 // VFIO_REGION_INFO_FLAG_WRITE
	RegionFlagMmap  = 1 << 2 // VFIO_REGION_INFO_FLAG_MMAP
	RegionFlagCaps  = 1 << 3 // VFIO_REGION_INFO_FLAG_CAPS

	IRQInfoFlagEventfd    = 1 << 0 // VFIO_IRQ_INFO_EVENTFD
	IRQInfoFlagMaskable   = 1 << 1 // VFIO_IRQ_INFO_MASKABLE
	IRQInfoFlagAutomasked = 1 << 2 // VFIO_IRQ_INFO_AUTOMASKED
	IRQInfoFlagNoResize   = 1 << 3 // VFIO_IRQ_INFO_NORESIZE
)

// VFIO PCI region and IRQ indices (linux/vfio.h, enum VFIO_PCI_*_REGION_INDEX
// and VFIO_PCI_*_IRQ_INDEX).
const (
	PCIBAR0RegionIndex   = 0
	PCIBAR5RegionIndex   = 5
	PCIROMRegionIndex    = 6
	PCIConfigRegionIndex = 7
	PCIVGARegionIndex    = 8
	PCINumRegions        = 9

	PCIINTxIRQIndex = 0
	PCIMSIIRQIndex  = 1
	PCIMSIXIRQIndex = 2
	PCIErrIRQIndex  = 3
	PCIReqIRQIndex  = 4
	PCINumIRQs      = 5
)
