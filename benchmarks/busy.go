package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Thresholds of the busy check. Figures measured while other work runs on
// the machine are noise; the report says so rather than guess.
const (
	busyLoadPerCore  = 0.5  // 1-minute load average per core, at start
	busyOthersShare  = 0.10 // share of the machine's CPU time used by other processes during the run
	busyCalibrateDev = 0.10 // change of the calibration loop's time between start and end
)

// machineState is what the busy check reads at the start and the end of a
// run.
type machineState struct {
	at        time.Time
	load      [3]float64    // /proc/loadavg; NaN if unreadable
	calibrate time.Duration // best time of the calibration loop
	cpuTotal  float64       // seconds of CPU time used on the whole machine (/proc/stat), NaN if unreadable
	cpuSelf   float64       // seconds of CPU time used by this process
}

func readMachineState() machineState {
	s := machineState{calibrate: calibrate()}
	s.at = time.Now()
	s.load = loadAverage()
	s.cpuTotal = machineCPU()
	s.cpuSelf = selfCPU()
	return s
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() [3]float64 {
	out := [3]float64{math.NaN(), math.NaN(), math.NaN()}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(b)) {
		if i >= len(out) {
			break
		}
		if v, err := strconv.ParseFloat(f, 64); err == nil {
			out[i] = v
		}
	}
	return out
}

func fmtLoad(l [3]float64) string {
	if math.IsNaN(l[0]) {
		return "?"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2])
}

// machineCPU returns the CPU time spent on the whole machine outside idle
// and iowait, in seconds, from the first line of /proc/stat (in USER_HZ,
// 100 per second on Linux).
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return math.NaN()
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return math.NaN()
	}
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return math.NaN()
		}
		busy += n
	}
	return busy / 100
}

// selfCPU returns the CPU time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// calibrate times a fixed CPU-bound loop five times and returns the best
// time. On an idle machine it barely moves between the start and the end of
// a run; when another process competes for the core, it slows down.
func calibrate() time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 5 {
		t0 := time.Now()
		x := uint64(88172645463325252)
		for range 20_000_000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		runtime.KeepAlive(x) // keep the loop from being optimised away
		best = min(best, time.Since(t0))
	}
	return best
}

// busyWarnings compares the states at the start and end of a run and
// returns one line per reason to distrust the figures.
func busyWarnings(start, end machineState) []string {
	var out []string
	ncpu := float64(runtime.NumCPU())
	if l := start.load[0]; l > busyLoadPerCore*ncpu {
		out = append(out, fmt.Sprintf("load average %.2f at start is above %.1f per core (%d cores); if it came from building this program, wait a minute and run the built binary", l, busyLoadPerCore, runtime.NumCPU()))
	}
	if share := othersShare(start, end); share > busyOthersShare {
		out = append(out, fmt.Sprintf("other processes used %.0f%% of the machine's CPU time during the run (threshold %.0f%%)", 100*share, 100*busyOthersShare))
	}
	if dev := float64(end.calibrate)/float64(start.calibrate) - 1; math.Abs(dev) > busyCalibrateDev {
		out = append(out, fmt.Sprintf("the calibration loop took %s at start and %s at end (%+.0f%%, threshold ±%.0f%%)", start.calibrate.Round(100*time.Microsecond), end.calibrate.Round(100*time.Microsecond), 100*dev, 100*busyCalibrateDev))
	}
	return out
}

// othersShare is the share of the machine's CPU time that other processes
// used between start and end, or NaN.
func othersShare(start, end machineState) float64 {
	wall := end.at.Sub(start.at).Seconds()
	others := (end.cpuTotal - start.cpuTotal) - (end.cpuSelf - start.cpuSelf)
	return others / (wall * float64(runtime.NumCPU()))
}
