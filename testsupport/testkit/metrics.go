package testkit

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Metrics is one scrape of a worker's /metrics: the value of every sample,
// keyed by its name and labels as exposed (`name{a="b"}`).
type Metrics map[string]float64

// Scrape reads url (a worker's /metrics) with client.
func Scrape(client *http.Client, url string) (Metrics, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	out := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("scraping %s: metric line %q: %w", url, line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	return out, nil
}

// Sum adds the samples named name that carry every one of labels (each
// written as in the exposition, e.g. `reason="move"`).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			s += v
		}
	}
	return s
}
