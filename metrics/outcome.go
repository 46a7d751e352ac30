package metrics

// Outcome is how one operation ended.
type Outcome uint8

// The outcomes of an operation. A failure has exactly one outcome; when
// several apply, the first in this list wins: a panic, then an operation
// timeout, then a terminal error, then any other error.
const (
	// OutcomeSuccess: the operation returned nil.
	OutcomeSuccess Outcome = iota
	// OutcomeError: the operation failed and will be retried.
	OutcomeError
	// OutcomeTerminal: the operation returned a terminal error; it is not
	// retried until the object changes.
	OutcomeTerminal
	// OutcomePanic: the operation panicked and the panic was recovered.
	OutcomePanic
	// OutcomeTimeout: the operation exceeded the operation timeout.
	OutcomeTimeout

	numOutcomes = iota
)

var outcomeNames = [numOutcomes]string{"success", "error", "terminal", "panic", "timeout"}

// String returns the outcome's name as used in metric keys and labels:
// "success", "error", "terminal", "panic" or "timeout".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes returns every outcome, in order.
func Outcomes() []Outcome {
	return []Outcome{OutcomeSuccess, OutcomeError, OutcomeTerminal, OutcomePanic, OutcomeTimeout}
}

// OutcomeCounts counts operations by outcome; index it with an [Outcome].
type OutcomeCounts [numOutcomes]int

// Add counts one operation with outcome o. An unknown outcome is counted as
// OutcomeError.
func (c *OutcomeCounts) Add(o Outcome) {
	if int(o) >= len(c) {
		o = OutcomeError
	}
	c[o]++
}

// Total returns the number of operations counted.
func (c *OutcomeCounts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Failed returns the number of operations counted with an outcome other
// than OutcomeSuccess.
func (c *OutcomeCounts) Failed() int { return c.Total() - c[OutcomeSuccess] }
