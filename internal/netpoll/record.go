package netpoll

// records follows the framing of the TLS records in the bytes a layer
// reads through an Under, so that the Under can tell when the layer holds
// part of a record, which it will not give up until the rest comes: each
// record is a header of 5 bytes (type, version, length) and length bytes
// (RFC 8446 section 5.1, as in every TLS version since SSL 3.0). It looks
// at the headers only.
type records struct {
	body uint16 // bytes of the current record's body still to come
	hdr  uint8  // bytes of the next record's header come so far, 0-4
	hi   uint8  // the length's first byte, once come
}

// add follows p, the next bytes of the stream.
func (r *records) add(p []byte) {
	for len(p) > 0 {
		if r.body > 0 {
			k := min(int(r.body), len(p))
			r.body -= uint16(k)
			p = p[k:]
			continue
		}
		switch r.hdr {
		case 3:
			r.hi = p[0]
		case 4:
			r.body = uint16(r.hi)<<8 | uint16(p[0])
		}
		r.hdr = (r.hdr + 1) % 5
		p = p[1:]
	}
}

// begun reports whether the stream stops inside a record: its header or
// its body came in part.
func (r *records) begun() bool { return r.hdr > 0 || r.body > 0 }
