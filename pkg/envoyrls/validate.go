package envoyrls

import (
	"fmt"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// validate rejects malformed requests before anything is counted.
func (s *Server) validate(req *rlsv3.RateLimitRequest) error {
	lim := s.limits
	if req.Domain == "" {
		return fmt.Errorf("%w: domain is empty", ErrInvalidRequest)
	}
	if len(req.Domain) > lim.MaxEntryBytes {
		return fmt.Errorf("%w: domain is %d bytes long, more than %d", ErrInvalidRequest, len(req.Domain), lim.MaxEntryBytes)
	}
	if len(req.Descriptors) == 0 {
		return fmt.Errorf("%w: no descriptors", ErrInvalidRequest)
	}
	if len(req.Descriptors) > lim.MaxDescriptors {
		return fmt.Errorf("%w: %d descriptors, more than %d", ErrInvalidRequest, len(req.Descriptors), lim.MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return fmt.Errorf("%w: descriptor %d has no entries", ErrInvalidRequest, i)
		}
		if len(d.Entries) > lim.MaxEntries {
			return fmt.Errorf("%w: descriptor %d has %d entries, more than %d", ErrInvalidRequest, i, len(d.Entries), lim.MaxEntries)
		}
		for j, e := range d.Entries {
			switch {
			case e == nil || e.Key == "":
				return fmt.Errorf("%w: descriptor %d entry %d has an empty key", ErrInvalidRequest, i, j)
			case len(e.Key) > lim.MaxEntryBytes || len(e.Value) > lim.MaxEntryBytes:
				return fmt.Errorf("%w: descriptor %d entry %d is longer than %d bytes", ErrInvalidRequest, i, j, lim.MaxEntryBytes)
			case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value):
				return fmt.Errorf("%w: descriptor %d entry %d is not valid UTF-8", ErrInvalidRequest, i, j)
			}
		}
		if h := d.HitsAddend; h != nil && h.Value > lim.MaxHits {
			return fmt.Errorf("%w: descriptor %d hits_addend %d is more than %d", ErrInvalidRequest, i, h.Value, lim.MaxHits)
		}
		if o := d.Limit; o != nil {
			unit, ok := overrideUnit(o.Unit)
			if !ok {
				return fmt.Errorf("%w: descriptor %d limit override has unit %v", ErrInvalidRequest, i, o.Unit)
			}
			if o.UnitMultiplier != nil {
				if o.UnitMultiplier.Value == 0 {
					return fmt.Errorf("%w: descriptor %d limit override has unit_multiplier 0", ErrInvalidRequest, i)
				}
				if _, err := window.Size(unit, uint64(o.UnitMultiplier.Value)); err != nil {
					return fmt.Errorf("%w: descriptor %d limit override: %w", ErrInvalidRequest, i, err)
				}
			}
		}
	}
	return nil
}
