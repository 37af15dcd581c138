package statestore

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// partitionCountsFile, in every <dir>/<group>, lists the input topics'
// partition counts this worker has planned with, oldest first: after the
// count changed, a moved symbol's history is in the store of the task that
// held it under an earlier count, and a restarted worker must still know
// those counts (package join, repartition.go).
const partitionCountsFile = "partition-counts"

// PartitionCounts returns the partition counts recorded by
// RecordPartitionCounts, oldest first (the longest list found in the
// state dirs), or nil when none was.
func (m *Manager) PartitionCounts() ([]int, error) {
	var best []int
	for _, d := range m.opts.Dirs {
		path := m.fs.PathJoin(m.groupDir(d), partitionCountsFile)
		f, err := m.fs.Open(path)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("statestore: open %s: %w", path, err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("statestore: read %s: %w", path, err)
		}
		var counts []int
		for _, s := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("statestore: %s: bad partition count %q", path, s)
			}
			counts = append(counts, n)
		}
		if len(counts) > len(best) {
			best = counts
		}
	}
	return best, nil
}

// RecordPartitionCounts writes counts (oldest first) into every state
// dir, replacing what was there (written to a temporary file, synced, then
// renamed over it).
func (m *Manager) RecordPartitionCounts(counts []int) error {
	var b strings.Builder
	for _, n := range counts {
		b.WriteString(strconv.Itoa(n))
		b.WriteByte('\n')
	}
	for _, d := range slices.Clone(m.opts.Dirs) {
		path := m.fs.PathJoin(m.groupDir(d), partitionCountsFile)
		tmp := path + ".tmp"
		f, err := m.fs.Create(tmp, "")
		if err != nil {
			return fmt.Errorf("statestore: write %s: %w", tmp, err)
		}
		_, err = f.Write([]byte(b.String()))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = m.fs.Rename(tmp, path)
		}
		if err != nil {
			_ = m.fs.Remove(tmp)
			return fmt.Errorf("statestore: write %s: %w", path, err)
		}
	}
	return nil
}
