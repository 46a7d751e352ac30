package keyqueue

// minHeap keeps the least value of a set whose members leave it without
// telling: each member is pushed with its value, and min drops the entries
// at the top that valid says have left, so every entry is pushed and
// popped once, at O(log n) each, and min never scans the set. The zero
// value is empty. It is not safe for concurrent use.
type minHeap[P any] []minEntry[P]

type minEntry[P any] struct {
	v int64
	p P
}

// push adds p with value v.
func (h *minHeap[P]) push(v int64, p P) {
	*h = append(*h, minEntry[P]{v, p})
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].v <= s[i].v {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

// min returns the member of least value among the entries valid accepts,
// dropping the others it meets at the top, and false if none is left.
func (h *minHeap[P]) min(valid func(P) bool) (P, bool) {
	for len(*h) > 0 {
		if s := *h; valid(s[0].p) {
			return s[0].p, true
		}
		h.pop()
	}
	*h = nil // no memory held once empty
	var zero P
	return zero, false
}

// compact drops every entry valid does not accept, once they outnumber
// the live members (live of them) and a few more: a member that leaves and
// comes back leaves an entry behind that the top may not reach soon. The
// cost is amortised over the pushes that made the entries.
func (h *minHeap[P]) compact(live int, valid func(P) bool) {
	if len(*h) <= 2*live+64 {
		return
	}
	s := (*h)[:0]
	for _, e := range *h {
		if valid(e.p) {
			s = append(s, e)
		}
	}
	clear((*h)[len(s):])
	*h = s
	for i := len(s)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
}

func (h *minHeap[P]) pop() {
	s := *h
	last := len(s) - 1
	s[0] = s[last]
	s[last] = minEntry[P]{}
	*h = s[:last]
	h.down(0)
}

func (s minHeap[P]) down(i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].v < s[least].v {
			least = l
		}
		if r < len(s) && s[r].v < s[least].v {
			least = r
		}
		if least == i {
			return
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
}
