package refcache

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"
)

// withSum appends the CRC an entry ends with, so that the fuzzer's bodies
// reach the decoder's fields instead of stopping at the checksum.
func withSum(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.ChecksumIEEE(body))
}

// FuzzDecode: any bytes decode without a panic, and an entry that decodes
// is exactly the one encode writes for what it decoded to.
func FuzzDecode(f *testing.F) {
	good := encode(sample(8))
	f.Add(good[:len(good)-4])
	f.Add([]byte(magic))
	f.Add(append([]byte(magic), 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, body []byte) {
		data := withSum(body)
		r, err := decode(data)
		if err != nil {
			return
		}
		if again := encode(r); !bytes.Equal(again, data) {
			t.Fatalf("decoded %d bytes that encode to %d other bytes", len(data), len(again))
		}
	})
}

// A damaged length (a checksummed entry of 50 bytes claiming forty million
// values) allocates nothing near what it claims.
func TestDamagedLengthAllocatesLittle(t *testing.T) {
	body := []byte(magic)
	for range 4 {
		body = binary.LittleEndian.AppendUint32(body, 1)
	}
	body = binary.LittleEndian.AppendUint32(body, 40_000_000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := decode(withSum(body)); err == nil {
		t.Fatal("an entry claiming 40 million values decoded")
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("decoding a damaged entry allocated %d bytes", grew)
	}
}
