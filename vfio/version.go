package vfio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Version negotiation (vfio-user.rst, "VFIO_USER_VERSION"). The version data
// is NUL-terminated JSON {"capabilities": {...}}. QEMU 11.1 drops the
// connection on a reply that is not NUL-terminated JSON, carries a value out
// of range, or is larger than its own request (it receives the reply into the
// request's buffer), so the server answers only with capabilities the client
// proposed, never raising a proposed limit.

// Capabilities is the "capabilities" object of VERSION. Absent fields are
// nil. QEMU's "migration" object is not modelled (this server does not yet
// offer migration, and encoding/json skips it).
type Capabilities struct {
	MaxMsgFDs       *uint32 `json:"max_msg_fds,omitempty"`
	MaxDataXferSize *uint32 `json:"max_data_xfer_size,omitempty"`
	PgSizes         *uint64 `json:"pgsizes,omitempty"`
	MaxDMAMaps      *uint32 `json:"max_dma_maps,omitempty"`
	WriteMultiple   *bool   `json:"write_multiple,omitempty"`
}

type versionData struct {
	Capabilities Capabilities `json:"capabilities"`
}

// Defaults of absent capabilities, from the specification's table.
const (
	defaultMaxMsgFDs  = 1
	defaultMaxDMAMaps = 65535
	defaultPgSizes    = 4096
)

// encodeVersion returns a VERSION payload: fixed part, JSON, NUL.
func encodeVersion(v VersionMsg, caps Capabilities) []byte {
	js, _ := json.Marshal(versionData{Capabilities: caps}) // plain fields, cannot fail
	b := v.Append(make([]byte, 0, VersionMsgSize+len(js)+1))
	b = append(b, js...)
	return append(b, 0)
}

// decodeVersion splits a VERSION payload. Empty version data means no
// capabilities; otherwise it must be NUL-terminated JSON.
func decodeVersion(b []byte) (VersionMsg, Capabilities, error) {
	v, err := DecodeVersionMsg(b)
	if err != nil {
		return v, Capabilities{}, err
	}
	data := b[VersionMsgSize:]
	if len(data) == 0 {
		return v, Capabilities{}, nil
	}
	if data[len(data)-1] != 0 {
		return v, Capabilities{}, fmt.Errorf("%w: version data not NUL-terminated", ErrInvalid)
	}
	data = bytes.TrimRight(data, "\x00")
	var vd versionData
	if err := json.Unmarshal(data, &vd); err != nil {
		return v, Capabilities{}, fmt.Errorf("%w: version data: %v", ErrInvalid, err)
	}
	return v, vd.Capabilities, nil
}

func ptr[T any](v T) *T { return &v }

func handleVersion(s *session, m *message) ([]byte, []*os.File, error) {
	if s.negotiated {
		return nil, nil, fmt.Errorf("%w: version already negotiated", ErrInvalid)
	}
	v, theirs, err := decodeVersion(m.payload)
	if err != nil {
		return nil, nil, err
	}
	if v.Major != VersionMajor {
		return nil, nil, fmt.Errorf("%w: protocol version %d.%d", ErrUnsupported, v.Major, v.Minor)
	}
	var ours Capabilities
	s.maxXfer = s.srv.maxXfer
	if p := theirs.MaxDataXferSize; p != nil {
		if *p == 0 {
			return nil, nil, fmt.Errorf("%w: max_data_xfer_size 0", ErrInvalid)
		}
		s.maxXfer = min(s.maxXfer, *p)
		ours.MaxDataXferSize = ptr(s.maxXfer)
	}
	if theirs.MaxMsgFDs != nil {
		ours.MaxMsgFDs = ptr(min(uint32(maxMsgFDs), *theirs.MaxMsgFDs))
	}
	if p := theirs.PgSizes; p != nil {
		if *p&defaultPgSizes == 0 {
			return nil, nil, fmt.Errorf("%w: pgsizes %#x without 4 KiB", ErrUnsupported, *p)
		}
		ours.PgSizes = ptr(uint64(defaultPgSizes))
	}
	if theirs.MaxDMAMaps != nil {
		ours.MaxDMAMaps = ptr(min(uint32(defaultMaxDMAMaps), *theirs.MaxDMAMaps))
	}
	if theirs.WriteMultiple != nil {
		ours.WriteMultiple = ptr(*theirs.WriteMultiple)
	}
	s.negotiated = true
	s.log.Debug().Uint32("max_data_xfer_size", s.maxXfer).Msg("vfio-user version negotiated")
	reply := encodeVersion(VersionMsg{Major: VersionMajor, Minor: min(v.Minor, VersionMinor)}, ours)
	return append(newFrame(len(reply)), reply...), nil, nil
}
