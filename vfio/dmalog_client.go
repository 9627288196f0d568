package vfio

import "fmt"

// DMALoggingStart asks the device to log its writes to ranges (none: all
// of client memory) with pageSize as a hint, and returns the page size the
// device chose.
func (c *Client) DMALoggingStart(pageSize uint64, ranges []DMALoggingRange) (uint64, error) {
	data := DMALoggingControl{PageSize: pageSize, NumRanges: uint32(len(ranges))}.Append(nil)
	for _, r := range ranges {
		data = r.Append(data)
	}
	reply, err := c.feature(FeatureDMALoggingStart|DeviceFeatureSet, data, 0)
	if err != nil {
		return 0, err
	}
	ctl, err := DecodeDMALoggingControl(reply)
	if err != nil {
		return 0, fmt.Errorf("vfio: dma logging start reply: %w", err)
	}
	return ctl.PageSize, nil
}

// DMALoggingStop ends the device's DMA logging.
func (c *Client) DMALoggingStop() error {
	_, err := c.feature(FeatureDMALoggingStop|DeviceFeatureSet, nil, 0)
	return err
}

// DMALoggingReport returns the device's dirty bitmap of [iova, iova+length)
// in units of pageSize (DMALoggingReport's layout) and clears what it
// reported.
func (c *Client) DMALoggingReport(iova, length, pageSize uint64) ([]uint64, error) {
	if length == 0 || pageSize == 0 {
		return nil, fmt.Errorf("%w: dma logging report of %d bytes in %d-byte pages", ErrInvalid, length, pageSize)
	}
	words := int(((length-1)/pageSize)/64 + 1)
	req := DMALoggingReport{IOVA: iova, Length: length, PageSize: pageSize}
	reply, err := c.feature(FeatureDMALoggingRep|DeviceFeatureGet, req.Append(nil), DMALoggingReportSize+8*words)
	if err != nil {
		return nil, err
	}
	if len(reply) != DMALoggingReportSize+8*words {
		return nil, fmt.Errorf("%w: dma logging report reply of %d bytes, want %d", ErrInvalid, len(reply), DMALoggingReportSize+8*words)
	}
	bitmap := make([]uint64, words)
	for i := range bitmap {
		bitmap[i] = ne.Uint64(reply[DMALoggingReportSize+8*i:])
	}
	return bitmap, nil
}
