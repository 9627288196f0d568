package vfio

// Payload structs of the vfio-user messages, one per table of the
// specification (see wire.go for the header, constants and conventions).

// VersionMsg is the fixed part of VFIO_USER_VERSION, request and reply
// (vfio-user.rst, "VFIO_USER_VERSION"); the NUL-terminated JSON "version
// data" follows it.
type VersionMsg struct {
	Major uint16
	Minor uint16
}

func (m VersionMsg) Append(b []byte) []byte {
	b = ne.AppendUint16(b, m.Major)
	return ne.AppendUint16(b, m.Minor)
}

func DecodeVersionMsg(b []byte) (VersionMsg, error) {
	if len(b) < VersionMsgSize {
		return VersionMsg{}, errShort("version", VersionMsgSize, len(b))
	}
	return VersionMsg{Major: ne.Uint16(b[0:]), Minor: ne.Uint16(b[2:])}, nil
}

// DMAMapMsg mirrors the VFIO_USER_DMA_MAP request (vfio-user.rst,
// "VFIO_USER_DMA_MAP"; linux/vfio.h struct vfio_iommu_type1_dma_map with
// vaddr replaced by the file offset).
type DMAMapMsg struct {
	Argsz  uint32
	Flags  uint32 // DMAProt* bits
	Offset uint64 // offset into the passed fd
	Addr   uint64 // IOVA
	Size   uint64
}

func (m DMAMapMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Size)
}

func DecodeDMAMapMsg(b []byte) (DMAMapMsg, error) {
	if len(b) < DMAMapMsgSize {
		return DMAMapMsg{}, errShort("dma map", DMAMapMsgSize, len(b))
	}
	return DMAMapMsg{
		Argsz:  ne.Uint32(b[0:]),
		Flags:  ne.Uint32(b[4:]),
		Offset: ne.Uint64(b[8:]),
		Addr:   ne.Uint64(b[16:]),
		Size:   ne.Uint64(b[24:]),
	}, nil
}

// DMAUnmapMsg mirrors the VFIO_USER_DMA_UNMAP request and reply
// (vfio-user.rst, "VFIO_USER_DMA_UNMAP"; struct vfio_iommu_type1_dma_unmap).
type DMAUnmapMsg struct {
	Argsz uint32
	Flags uint32 // DMAUnmapFlag* bits
	Addr  uint64
	Size  uint64
}

func (m DMAUnmapMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Size)
}

func DecodeDMAUnmapMsg(b []byte) (DMAUnmapMsg, error) {
	if len(b) < DMAUnmapMsgSize {
		return DMAUnmapMsg{}, errShort("dma unmap", DMAUnmapMsgSize, len(b))
	}
	return DMAUnmapMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Addr:  ne.Uint64(b[8:]),
		Size:  ne.Uint64(b[16:]),
	}, nil
}

// DeviceInfoMsg mirrors VFIO_USER_DEVICE_GET_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_INFO"; struct vfio_device_info).
type DeviceInfoMsg struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumIRQs    uint32
}

func (m DeviceInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.NumRegions)
	return ne.AppendUint32(b, m.NumIRQs)
}

func DecodeDeviceInfoMsg(b []byte) (DeviceInfoMsg, error) {
	if len(b) < DeviceInfoMsgSize {
		return DeviceInfoMsg{}, errShort("device info", DeviceInfoMsgSize, len(b))
	}
	return DeviceInfoMsg{
		Argsz:      ne.Uint32(b[0:]),
		Flags:      ne.Uint32(b[4:]),
		NumRegions: ne.Uint32(b[8:]),
		NumIRQs:    ne.Uint32(b[12:]),
	}, nil
}

// RegionInfoMsg mirrors VFIO_USER_DEVICE_GET_REGION_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_REGION_INFO"; struct
// vfio_region_info). In a reply, capabilities follow at CapOffset.
type RegionInfoMsg struct {
	Argsz     uint32
	Flags     uint32 // RegionFlag* bits
	Index     uint32
	CapOffset uint32 // from the start of this struct; 0 = none
	Size      uint64
	Offset    uint64 // mmap offset into the passed fd
}

func (m RegionInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	b = ne.AppendUint32(b, m.CapOffset)
	b = ne.AppendUint64(b, m.Size)
	return ne.AppendUint64(b, m.Offset)
}

func DecodeRegionInfoMsg(b []byte) (RegionInfoMsg, error) {
	if len(b) < RegionInfoMsgSize {
		return RegionInfoMsg{}, errShort("region info", RegionInfoMsgSize, len(b))
	}
	return RegionInfoMsg{
		Argsz:     ne.Uint32(b[0:]),
		Flags:     ne.Uint32(b[4:]),
		Index:     ne.Uint32(b[8:]),
		CapOffset: ne.Uint32(b[12:]),
		Size:      ne.Uint64(b[16:]),
		Offset:    ne.Uint64(b[24:]),
	}, nil
}

// CapHeader mirrors struct vfio_info_cap_header (vfio-user.rst, "VFIO cap
// header format"). Next is relative to the start of the region info struct.
type CapHeader struct {
	ID      uint16
	Version uint16
	Next    uint32
}

func (m CapHeader) Append(b []byte) []byte {
	b = ne.AppendUint16(b, m.ID)
	b = ne.AppendUint16(b, m.Version)
	return ne.AppendUint32(b, m.Next)
}

func DecodeCapHeader(b []byte) (CapHeader, error) {
	if len(b) < CapHeaderSize {
		return CapHeader{}, errShort("cap header", CapHeaderSize, len(b))
	}
	return CapHeader{ID: ne.Uint16(b[0:]), Version: ne.Uint16(b[2:]), Next: ne.Uint32(b[4:])}, nil
}

// SparseMmapCap mirrors the body of struct vfio_region_info_cap_sparse_mmap
// after its cap header (vfio-user.rst, "VFIO region info cap sparse mmap");
// NrAreas SparseArea entries follow.
type SparseMmapCap struct {
	NrAreas  uint32
	Reserved uint32
}

func (m SparseMmapCap) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.NrAreas)
	return ne.AppendUint32(b, m.Reserved)
}

func DecodeSparseMmapCap(b []byte) (SparseMmapCap, error) {
	if len(b) < SparseMmapCapSize {
		return SparseMmapCap{}, errShort("sparse mmap cap", SparseMmapCapSize, len(b))
	}
	return SparseMmapCap{NrAreas: ne.Uint32(b[0:]), Reserved: ne.Uint32(b[4:])}, nil
}

// Append appends a's wire form (struct vfio_region_sparse_mmap_area) to b.
func (a SparseArea) Append(b []byte) []byte {
	b = ne.AppendUint64(b, a.Offset)
	return ne.AppendUint64(b, a.Size)
}

func DecodeSparseArea(b []byte) (SparseArea, error) {
	if len(b) < SparseAreaSize {
		return SparseArea{}, errShort("sparse area", SparseAreaSize, len(b))
	}
	return SparseArea{Offset: ne.Uint64(b[0:]), Size: ne.Uint64(b[8:])}, nil
}

// RegionIOFDsMsg mirrors the fixed part of VFIO_USER_DEVICE_GET_REGION_IO_FDS
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_REGION_IO_FDS").
type RegionIOFDsMsg struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Count uint32
}

func (m RegionIOFDsMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	return ne.AppendUint32(b, m.Count)
}

func DecodeRegionIOFDsMsg(b []byte) (RegionIOFDsMsg, error) {
	if len(b) < RegionIOFDsSize {
		return RegionIOFDsMsg{}, errShort("region io fds", RegionIOFDsSize, len(b))
	}
	return RegionIOFDsMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Count: ne.Uint32(b[12:]),
	}, nil
}

// IRQInfoMsg mirrors VFIO_USER_DEVICE_GET_IRQ_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_IRQ_INFO"; struct vfio_irq_info).
type IRQInfoMsg struct {
	Argsz uint32
	Flags uint32 // IRQInfoFlag* bits
	Index uint32
	Count uint32
}

func (m IRQInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	return ne.AppendUint32(b, m.Count)
}

func DecodeIRQInfoMsg(b []byte) (IRQInfoMsg, error) {
	if len(b) < IRQInfoMsgSize {
		return IRQInfoMsg{}, errShort("irq info", IRQInfoMsgSize, len(b))
	}
	return IRQInfoMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Count: ne.Uint32(b[12:]),
	}, nil
}

// IRQSetMsg mirrors the fixed part of VFIO_USER_DEVICE_SET_IRQS
// (vfio-user.rst, "VFIO_USER_DEVICE_SET_IRQS"; struct vfio_irq_set). With
// IRQSetDataBool, Count bool bytes follow; eventfds travel as SCM_RIGHTS.
type IRQSetMsg struct {
	Argsz uint32
	Flags uint32 // IRQSet* bits
	Index uint32
	Start uint32
	Count uint32
}

func (m IRQSetMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	b = ne.AppendUint32(b, m.Start)
	return ne.AppendUint32(b, m.Count)
}

func DecodeIRQSetMsg(b []byte) (IRQSetMsg, error) {
	if len(b) < IRQSetMsgSize {
		return IRQSetMsg{}, errShort("irq set", IRQSetMsgSize, len(b))
	}
	return IRQSetMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Start: ne.Uint32(b[12:]),
		Count: ne.Uint32(b[16:]),
	}, nil
}

// RegionAccessMsg mirrors the fixed part of VFIO_USER_REGION_READ and
// VFIO_USER_REGION_WRITE, request and reply (vfio-user.rst,
// "VFIO_USER_REGION_READ"); Count data bytes follow where the table has data.
type RegionAccessMsg struct {
	Offset uint64
	Region uint32
	Count  uint32
}

func (m RegionAccessMsg) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint32(b, m.Region)
	return ne.AppendUint32(b, m.Count)
}

func DecodeRegionAccessMsg(b []byte) (RegionAccessMsg, error) {
	if len(b) < RegionAccessSize {
		return RegionAccessMsg{}, errShort("region access", RegionAccessSize, len(b))
	}
	return RegionAccessMsg{Offset: ne.Uint64(b[0:]), Region: ne.Uint32(b[8:]), Count: ne.Uint32(b[12:])}, nil
}

// DMAAccessMsg mirrors the fixed part of VFIO_USER_DMA_READ and
// VFIO_USER_DMA_WRITE requests (vfio-user.rst, "VFIO_USER_DMA_READ"). These
// go server to client; this server never sends them (it mmaps guest RAM).
type DMAAccessMsg struct {
	Addr  uint64
	Count uint64
}

func (m DMAAccessMsg) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Count)
}

func DecodeDMAAccessMsg(b []byte) (DMAAccessMsg, error) {
	if len(b) < DMAAccessSize {
		return DMAAccessMsg{}, errShort("dma access", DMAAccessSize, len(b))
	}
	return DMAAccessMsg{Addr: ne.Uint64(b[0:]), Count: ne.Uint64(b[8:])}, nil
}

// WriteMultiMsg mirrors the fixed part of VFIO_USER_REGION_WRITE_MULTI,
// request and reply (vfio-user.rst, "VFIO_USER_REGION_WRITE_MULTI"); in a
// request WrCnt WriteOne entries follow.
type WriteMultiMsg struct {
	WrCnt uint64
}

func (m WriteMultiMsg) Append(b []byte) []byte { return ne.AppendUint64(b, m.WrCnt) }

func DecodeWriteMultiMsg(b []byte) (WriteMultiMsg, error) {
	if len(b) < WriteMultiSize {
		return WriteMultiMsg{}, errShort("write multi", WriteMultiSize, len(b))
	}
	return WriteMultiMsg{WrCnt: ne.Uint64(b)}, nil
}

// WriteOne mirrors one entry of VFIO_USER_REGION_WRITE_MULTI (vfio-user.rst,
// "Single Device Write Format"). Only Data[:Count] is meaningful.
type WriteOne struct {
	Offset uint64
	Region uint32
	Count  uint32
	Data   [WriteOneMaxData]byte
}

func (m WriteOne) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint32(b, m.Region)
	b = ne.AppendUint32(b, m.Count)
	return append(b, m.Data[:]...)
}

func DecodeWriteOne(b []byte) (WriteOne, error) {
	if len(b) < WriteOneSize {
		return WriteOne{}, errShort("write multi entry", WriteOneSize, len(b))
	}
	w := WriteOne{Offset: ne.Uint64(b[0:]), Region: ne.Uint32(b[8:]), Count: ne.Uint32(b[12:])}
	copy(w.Data[:], b[16:24])
	return w, nil
}

// DeviceFeatureMsg mirrors the fixed part of VFIO_USER_DEVICE_FEATURE
// (vfio-user.rst, "VFIO_USER_DEVICE_FEATURE"; struct vfio_device_feature);
// feature data follows.
type DeviceFeatureMsg struct {
	Argsz uint32
	Flags uint32 // feature index in bits 0-15, GET/SET/PROBE in 16-18
}

func (m DeviceFeatureMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	return ne.AppendUint32(b, m.Flags)
}

func DecodeDeviceFeatureMsg(b []byte) (DeviceFeatureMsg, error) {
	if len(b) < DeviceFeatureSize {
		return DeviceFeatureMsg{}, errShort("device feature", DeviceFeatureSize, len(b))
	}
	return DeviceFeatureMsg{Argsz: ne.Uint32(b[0:]), Flags: ne.Uint32(b[4:])}, nil
}

// MigDataMsg mirrors the fixed part of VFIO_USER_MIG_DATA_READ and
// VFIO_USER_MIG_DATA_WRITE (vfio-user.rst, "VFIO_USER_MIG_DATA_READ"); data
// follows in a read reply and a write request.
type MigDataMsg struct {
	Argsz uint32
	Size  uint32
}

func (m MigDataMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	return ne.AppendUint32(b, m.Size)
}

func DecodeMigDataMsg(b []byte) (MigDataMsg, error) {
	if len(b) < MigDataSize {
		return MigDataMsg{}, errShort("mig data", MigDataSize, len(b))
	}
	return MigDataMsg{Argsz: ne.Uint32(b[0:]), Size: ne.Uint32(b[4:])}, nil
}

// MigrationFeature mirrors struct vfio_device_feature_migration, the data of
// a VFIO_DEVICE_FEATURE_MIGRATION GET reply (vfio-user.rst,
// "VFIO_DEVICE_FEATURE_MIGRATION").
type MigrationFeature struct {
	Flags uint64 // Migration* bits
}

func (m MigrationFeature) Append(b []byte) []byte { return ne.AppendUint64(b, m.Flags) }

func DecodeMigrationFeature(b []byte) (MigrationFeature, error) {
	if len(b) < MigrationFeatSize {
		return MigrationFeature{}, errShort("migration feature", MigrationFeatSize, len(b))
	}
	return MigrationFeature{Flags: ne.Uint64(b)}, nil
}

// MigStateFeature mirrors struct vfio_device_feature_mig_state, the data of
// VFIO_DEVICE_FEATURE_MIG_DEVICE_STATE (vfio-user.rst,
// "VFIO_DEVICE_FEATURE_MIG_DEVICE_STATE"). DataFD is unused in vfio-user;
// this server answers a GET with -1.
type MigStateFeature struct {
	DeviceState uint32 // a MigState
	DataFD      int32
}

func (m MigStateFeature) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.DeviceState)
	return ne.AppendUint32(b, uint32(m.DataFD))
}

func DecodeMigStateFeature(b []byte) (MigStateFeature, error) {
	if len(b) < MigStateFeatSize {
		return MigStateFeature{}, errShort("mig state feature", MigStateFeatSize, len(b))
	}
	return MigStateFeature{DeviceState: ne.Uint32(b[0:]), DataFD: int32(ne.Uint32(b[4:]))}, nil
}

// MigDataSizeFeature mirrors struct vfio_device_feature_mig_data_size, the
// data of a VFIO_DEVICE_FEATURE_MIG_DATA_SIZE GET reply (linux/vfio.h).
type MigDataSizeFeature struct {
	StopCopyLength uint64
}

func (m MigDataSizeFeature) Append(b []byte) []byte { return ne.AppendUint64(b, m.StopCopyLength) }

func DecodeMigDataSizeFeature(b []byte) (MigDataSizeFeature, error) {
	if len(b) < MigDataSizeFeatSz {
		return MigDataSizeFeature{}, errShort("mig data size feature", MigDataSizeFeatSz, len(b))
	}
	return MigDataSizeFeature{StopCopyLength: ne.Uint64(b)}, nil
}
