package telemetry

import "encoding/binary"

// The protobuf wire format as the OTLP exporter writes it (what
// google.golang.org/protobuf/encoding/protowire does): linking protowire
// ran protobuf's internal/detrand init in every herald process, which opens
// and reads the executable to seed protobuf's unstable output formatting.

// wireNumber is a field number.
type wireNumber int32

// Wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func pwVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func pwTag(b []byte, num wireNumber, typ int) []byte {
	return pwVarint(b, uint64(num)<<3|uint64(typ&7))
}

func pwBytes(b []byte, v []byte) []byte {
	return append(pwVarint(b, uint64(len(v))), v...)
}

func pwString(b []byte, v string) []byte {
	return append(pwVarint(b, uint64(len(v))), v...)
}

func pwFixed64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
func pwFixed32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func pwBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
