package uffdwp

// The kernel ABI this package speaks. No logic here.

// From include/uapi/linux/userfaultfd.h.
const (
	uffdAPI          = 0xAA // UFFD_API
	uffdUserModeOnly = 1    // UFFD_USER_MODE_ONLY, a userfaultfd(2) flag

	featureWPHugetlbfsShmem = 1 << 12 // UFFD_FEATURE_WP_HUGETLBFS_SHMEM
	featureWPUnpopulated    = 1 << 13 // UFFD_FEATURE_WP_UNPOPULATED
	featureWPAsync          = 1 << 15 // UFFD_FEATURE_WP_ASYNC

	registerModeWP = 1 << 1 // UFFDIO_REGISTER_MODE_WP

	// _IOWR(UFFDIO, _UFFDIO_API, struct uffdio_api): 0xAA, 0x3F, 24 bytes.
	ioctlUffdioAPI = 0xC018AA3F
	// _IOWR(UFFDIO, _UFFDIO_REGISTER, struct uffdio_register): 0xAA, 0x00, 32 bytes.
	ioctlUffdioRegister = 0xC020AA00
	// _IOR(UFFDIO, _UFFDIO_UNREGISTER, struct uffdio_range): 0xAA, 0x01, 16 bytes.
	ioctlUffdioUnregister = 0x8010AA01
)

// wantFeatures are the features a write log needs: write faults resolved
// by the kernel itself (no handler thread), never-populated pages
// protected by markers, and protection of shmem (a memfd) at all.
const wantFeatures = featureWPAsync | featureWPUnpopulated | featureWPHugetlbfsShmem

// uffdioAPI mirrors struct uffdio_api.
type uffdioAPI struct {
	API      uint64
	Features uint64
	Ioctls   uint64
}

// uffdioRegister mirrors struct uffdio_register (its struct uffdio_range
// inlined).
type uffdioRegister struct {
	Start  uint64
	Len    uint64
	Mode   uint64
	Ioctls uint64
}

// uffdioRange mirrors struct uffdio_range.
type uffdioRange struct {
	Start uint64
	Len   uint64
}

// From include/uapi/linux/fs.h (PAGEMAP_SCAN, Linux 6.7).
const (
	// _IOWR('f', 16, struct pm_scan_arg): 0x66, 0x10, 96 bytes.
	ioctlPagemapScan = 0xC0606610

	scanWPMatching   = 1 << 0 // PM_SCAN_WP_MATCHING
	scanCheckWPAsync = 1 << 1 // PM_SCAN_CHECK_WPASYNC

	pageIsWPAllowed = 1 << 0 // PAGE_IS_WPALLOWED
	pageIsWritten   = 1 << 1 // PAGE_IS_WRITTEN
)

// pmScanArg mirrors struct pm_scan_arg.
type pmScanArg struct {
	Size              uint64
	Flags             uint64
	Start             uint64
	End               uint64
	WalkEnd           uint64
	Vec               uint64
	VecLen            uint64
	MaxPages          uint64
	CategoryInverted  uint64
	CategoryMask      uint64
	CategoryAnyofMask uint64
	ReturnMask        uint64
}

// pageRegion mirrors struct page_region.
type pageRegion struct {
	Start      uint64
	End        uint64
	Categories uint64
}
