package gtt

// Extent is a run of host backing memory: Len bytes starting at byte Off of
// the host pool. Resolving a graphics range yields extents in graphics-address
// order; adjacent backing pages are merged into one extent.
type Extent struct {
	Off uint64
	Len uint64
}

// TotalLen is the number of bytes covered by xs.
func TotalLen(xs []Extent) uint64 {
	var n uint64
	for _, x := range xs {
		n += x.Len
	}
	return n
}
