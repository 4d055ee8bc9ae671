package redisstore

// slot returns the Redis Cluster hash slot of key, 0 to 16383: the CRC16
// (XMODEM) of its hash tag modulo 16384. The hash tag is what lies between
// the first '{' and the next '}' when that is not empty, else the whole key,
// exactly as Redis Cluster computes it. It takes the key as a string or as
// bytes, so a key built in a buffer need not be copied.
func slot[K string | []byte](key K) uint16 {
	if s := indexByte(key, '{'); s >= 0 {
		if e := indexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) % 16384
}

// indexByte is strings.IndexByte for a string or bytes.
func indexByte[K string | []byte](s K, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16[K string | []byte](s K) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
