package envoyrls

// Admission is an event of the cap on concurrent ShouldRateLimit calls
// (Options.MaxConcurrent), told to an Observer.
type Admission uint8

// Admission events. Calls in flight are those admitted and not yet
// released.
const (
	// AdmissionAdmitted: a call took a slot, before any store work.
	AdmissionAdmitted Admission = iota
	// AdmissionReleased: an admitted call gave its slot back, after its
	// last store call (refunds included) returned.
	AdmissionReleased
	// AdmissionRejected: every slot was taken; the call was refused with
	// ErrOverloaded (ResourceExhausted) without waiting.
	AdmissionRejected
)

func (a Admission) String() string {
	return [...]string{"admitted", "released", "rejected"}[a]
}

// admit takes a slot for a ShouldRateLimit call, or reports ErrOverloaded
// at once when all are taken: a call is never queued, so one over the cap
// costs no store work and no wait, and Envoy's failure_mode_deny decides
// it as it decides any error. The caller must release an admitted slot
// once its store work has returned.
func (s *Server) admit() error {
	select {
	case s.slots <- struct{}{}:
		s.observeAdmission(AdmissionAdmitted)
		return nil
	default:
		s.observeAdmission(AdmissionRejected)
		return ErrOverloaded
	}
}

// release gives back the slot admit took.
func (s *Server) release() {
	s.observeAdmission(AdmissionReleased)
	<-s.slots
}

func (s *Server) observeAdmission(a Admission) {
	if s.obs != nil {
		s.obs.Admission(a)
	}
}
