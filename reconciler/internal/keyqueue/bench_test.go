package keyqueue

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// benchWaiting returns n keyStates of failed updates with due times spread
// so that the heap does real work.
func benchWaiting(lc *Queue[*int], n int) []*State[*int] {
	t0 := time.Unix(1_000_000, 0)
	states := make([]*State[*int], n)
	for i := range states {
		s := lc.Add(Change[*int]{Key: strconv.Itoa(i), Task: Task[*int]{Rev: uint64(i + 1), StatusID: uint64(i + 1)}})
		lc.Done(s, "", Task[*int]{}, Outcome[*int]{Ran: true, Err: errBench, Written: true, RetryAt: t0.Add(time.Duration((i*7919)%n) * time.Millisecond).UnixNano(), ErrID: 1}, t0)
		states[i] = s
	}
	return states
}

var errBench = fmt.Errorf("bench failure")

// BenchmarkRetriesDue fills the retry heap with n failed keys and takes
// them all back when due: 1000 is a round's worth, 100,000 a retry storm.
func BenchmarkRetriesDue(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			due := time.Unix(2_000_000, 0).UnixNano()
			for b.Loop() {
				lc := New[*int](nil)
				benchWaiting(lc, n)
				for {
					taken := lc.Get(Due, 1, due)
					if len(taken) == 0 {
						break
					}
					lc.Done(taken[0], "", Task[*int]{}, Outcome[*int]{Forget: true}, time.Time{})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/object")
		})
	}
}

// BenchmarkObserveWhileRetrying measures what collecting a change costs
// while retries wait: the lookup of its key (a miss here, the common case).
func BenchmarkObserveWhileRetrying(b *testing.B) {
	lc := New[*int](nil)
	benchWaiting(lc, 1000)
	key := "not a key of the queue"
	for b.Loop() {
		lc.Add(Change[*int]{Key: key, Keyed: true, As: Backlogged})
	}
}

// BenchmarkLowWatermark measures the retry low watermark after its holder
// left, which rescans the heap.
func BenchmarkLowWatermark(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		lc := New[*int](nil)
		states := benchWaiting(lc, 1000)
		lc.Done(states[0], "", Task[*int]{}, Outcome[*int]{Forget: true}, time.Time{}) // holds the lowest revision
		b.StartTimer()
		_ = lc.Lows()
	}
}
