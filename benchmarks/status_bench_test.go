package main

import (
	"fmt"
	"testing"

	"github.com/converge-go/converge/status"
)

// Benchmarks of status.Set, the per-object cost of several reconcilers on
// one object: every reconciler reads its entry on every change and writes
// it once per reconciliation.

func benchSet(n int) (status.Set, []string) {
	names := make([]string, n)
	s := status.NewSet()
	for i := range names {
		names[i] = fmt.Sprintf("reconciler-%d", i)
		s = s.Set(names[i], status.Done())
	}
	return s, names
}

func BenchmarkSetGet(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, names := benchSet(n)
			i := 0
			for b.Loop() {
				if s.Get(names[i%n]).Kind != status.KindDone {
					b.Fatal("not Done")
				}
				i++
			}
		})
	}
}

func BenchmarkSetSet(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, names := benchSet(n)
			done := status.Done()
			i := 0
			for b.Loop() {
				s = s.Set(names[i%n], done)
				i++
			}
		})
	}
}

func BenchmarkSetPending(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, _ := benchSet(n)
			for b.Loop() {
				s = s.Pending()
			}
		})
	}
}

func BenchmarkStatusDone(b *testing.B) {
	for b.Loop() {
		_ = status.Done()
	}
}
