package demo_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/kafkasec/kafkasectest"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statuspage"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

// TestSecureFleet runs workers over TLS + SASL SCRAM to the broker, with a
// peer token and HTTPS between them. The roundrobin assignor makes every
// join a remote lookup, so each alert proves a lookup that sent the token
// over https. The password and the token appear in no log line (debug
// level), no /metrics and no /v1/assignment answer.
func TestSecureFleet(t *testing.T) {
	t.Parallel()
	sb := kafkasectest.Start(t)
	dir := t.TempDir()
	_, httpCert, httpKey := sb.CA.Issue(t, dir, "worker-http")
	token := "peer-token-" + sb.Password[3:]
	tokenFile := filepath.Join(dir, "peer-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sec := kafkasec.Config{CAFile: sb.CA.File, SASLMechanism: sb.Mechanism, SASLUsername: sb.User, SASLPasswordFile: sb.PasswordFile}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := sec.Connect(ctx, []string{sb.Addr}, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := demo.UseBrokers(ctx, []string{sb.Addr}, 6, 1, tr)
	if err != nil {
		t.Fatal(err)
	}
	f := testkit.NewFleet(b, t.TempDir(), node.Config{
		MemberConfig:  node.MemberConfig{Assignor: "roundrobin"},
		PeerTokenFile: tokenFile,
		HTTPCertFile:  httpCert,
		HTTPKeyFile:   httpKey,
		PeerCAFile:    sb.CA.File,
		Logger:        log,
	})
	t.Cleanup(func() {
		if err := f.StopAll(); err != nil {
			t.Errorf("stopping workers: %v", err)
		}
		b.Close()
	})
	for i := range 4 {
		if _, err := f.Start(ctx, fmt.Sprintf("w%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.WaitStable(ctx, 45*time.Second); err != nil {
		t.Fatal(err)
	}
	sum, err := loadgen.Run(ctx, loadgen.Config{Brokers: b.Addrs, Transport: tr, MarketTopic: b.Topics.Market,
		NotificationsTopic: b.Topics.Notifications, Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 3})
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]record.Alert{}
	r := oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions)
	for len(last) < sum.Notifications && ctx.Err() == nil {
		if err := r.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		for _, v := range r.Values() {
			var a record.Alert
			if err := json.Unmarshal(v, &a); err != nil {
				t.Fatalf("alert %q: %v", v, err)
			}
			last[a.ID] = a
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range sum.NotificationIDs {
		a, ok := last[id]
		switch {
		case !ok:
			t.Errorf("no alert for %s", id)
		case a.Result != record.ResultRemote || a.Price == nil || *a.Price != sum.LastPrice[a.Symbol]:
			t.Errorf("alert %s: result %s price %v, want remote with %v", id, a.Result, a.Price, sum.LastPrice[a.Symbol])
		}
	}

	// The HTTP API of one worker, over https with the test CA.
	pool, err := kafkasec.LoadCAFile(sb.CA.File)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var addr string
	for _, n := range f.Workers() {
		addr = n.Addr()
		break
	}
	get := func(path, bearer string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	var bodies []string
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/v1/assignment", "", 401},
		{"/v1/assignment", "wrong", 401},
		{"/v1/prices/BBCA", "", 401},
		{"/v1/assignment", token, 200},
		{"/metrics", "", 200},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.want {
			t.Errorf("GET %s (token %q): %d, want %d: %s", tc.path, tc.token, code, tc.want, body)
		}
		bodies = append(bodies, body)
	}
	metrics := bodies[len(bodies)-1]
	for _, want := range []string{`joiner_http_unauthorized_total{reason="missing"} 2`, `joiner_http_unauthorized_total{reason="invalid"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The status page and its JSON, with the token: the group's grid was
	// read from every member over https with the token.
	for _, path := range []string{"/?refresh=0", "/v1/status"} {
		code, body := get(path, token)
		if code != 200 {
			t.Errorf("GET %s with the token: %d: %s", path, code, body)
		}
		bodies = append(bodies, body)
	}
	var st statuspage.Status
	if err := json.Unmarshal([]byte(bodies[len(bodies)-1]), &st); err != nil {
		t.Fatalf("/v1/status: %v", err)
	}
	if len(st.Group.Members) != len(f.Workers()) {
		t.Errorf("/v1/status names %d members, %d run", len(st.Group.Members), len(f.Workers()))
	}
	for _, m := range st.Group.Members {
		if m.Error != "" {
			t.Errorf("the status page could not read member %s: %s", m.Instance, m.Error)
		}
	}
	// Plain http to the TLS listener gets nothing.
	if res, err := http.Get("http://" + addr + "/v1/assignment"); err == nil {
		if res.StatusCode == 200 {
			t.Error("plain http got an answer from the https listener")
		}
		res.Body.Close()
	}
	for _, secret := range []string{sb.Password, token} {
		for i, body := range bodies {
			if strings.Contains(body, secret) {
				t.Errorf("HTTP answer %d holds a secret: %s", i, body)
			}
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the logs hold a secret")
		}
	}
	if !strings.Contains(logs.String(), `"sasl":"SCRAM-SHA-512 as joiner"`) {
		t.Errorf("the logs do not describe the connection security")
	}
}
