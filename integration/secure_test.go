package integration

// The secured suite: joiner against a real Kafka broker with a SASL_SSL
// (SCRAM-SHA-512) listener, as scripts/kafka-secure starts it. It runs
// only when the JOINER_KAFKA_SECURE_* variables are set:
//
//	scripts/kafka-secure start
//	eval "$(scripts/kafka-secure env | sed 's/^/export /')"
//	go test -count=1 -run Secure ./integration/

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/kafkasec/kafkasectest"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

const (
	secureBrokersEnv  = "JOINER_KAFKA_SECURE_BROKERS"
	secureCAEnv       = "JOINER_KAFKA_SECURE_CA_FILE"
	secureUserEnv     = "JOINER_KAFKA_SECURE_USER"
	securePasswordEnv = "JOINER_KAFKA_SECURE_PASSWORD_FILE"
	// Optional: the mTLS listener and the client certificate it accepts.
	secureMTLSEnv = "JOINER_KAFKA_SECURE_MTLS_BROKERS"
	secureCertEnv = "JOINER_KAFKA_SECURE_CLIENT_CERT_FILE"
	secureKeyEnv  = "JOINER_KAFKA_SECURE_CLIENT_KEY_FILE"
)

const secureHowToRun = "secured suite: set " + secureBrokersEnv + ", " + secureCAEnv + ", " + secureUserEnv + " and " +
	securePasswordEnv + ", e.g. scripts/kafka-secure start && eval \"$(scripts/kafka-secure env | sed 's/^/export /')\" && " +
	"go test -count=1 -run Secure ./integration/"

// secureEnv is the secured broker of the suite.
type secureEnv struct {
	brokers                       []string
	caFile, user, passwordFile    string
	password                      string
	mtlsBrokers                   []string
	clientCertFile, clientKeyFile string
}

// secure is nil unless the secured suite is enabled.
var secure *secureEnv

func loadSecureEnv() *secureEnv {
	s := &secureEnv{
		brokers:        splitEnv(secureBrokersEnv),
		caFile:         os.Getenv(secureCAEnv),
		user:           os.Getenv(secureUserEnv),
		passwordFile:   os.Getenv(securePasswordEnv),
		mtlsBrokers:    splitEnv(secureMTLSEnv),
		clientCertFile: os.Getenv(secureCertEnv),
		clientKeyFile:  os.Getenv(secureKeyEnv),
	}
	if len(s.brokers) == 0 || s.caFile == "" || s.user == "" || s.passwordFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.passwordFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %s: %v\n", securePasswordEnv, err)
		return nil
	}
	s.password = strings.TrimRight(string(b), "\r\n")
	return s
}

func splitEnv(name string) []string {
	var out []string
	for _, b := range strings.Split(os.Getenv(name), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func requireSecure(t *testing.T) *secureEnv {
	t.Helper()
	if secure == nil {
		t.Skip(secureHowToRun)
	}
	return secure
}

// flags are the broker security flags of every joiner command.
func (s *secureEnv) flags() []string {
	return []string{"--tls-ca-file", s.caFile, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", s.user, "--sasl-password-file", s.passwordFile}
}

func (s *secureEnv) transport(t *testing.T) *kafka.Transport {
	t.Helper()
	sec, err := (&kafkasec.Config{CAFile: s.caFile, SASLMechanism: "SCRAM-SHA-512", SASLUsername: s.user, SASLPasswordFile: s.passwordFile}).Build()
	if err != nil {
		t.Fatal(err)
	}
	return sec.Transport()
}

// joiner runs the joiner binary and returns its exit status, combined
// output and duration.
func joiner(t *testing.T, timeout time.Duration, env []string, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, joinerBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running joiner %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), took
}

// TestSecureDemo: `joiner demo --brokers <SASL_SSL>` with the TLS and SASL
// flags gives the four-worker experiment's 30/30 local joins.
func TestSecureDemo(t *testing.T) {
	s := requireSecure(t)
	args := append([]string{"demo", "--brokers", strings.Join(s.brokers, ","), "--json", "--verbose", "--timeout", "2m"}, s.flags()...)
	code, out, took := joiner(t, 3*time.Minute, nil, args...)
	if code != 0 {
		t.Fatalf("joiner demo: exit %d after %s:\n%s", code, took, out)
	}
	checkDemoReport(t, out)
	if strings.Contains(out, s.password) {
		t.Error("the demo's output holds the password")
	}
}

func checkDemoReport(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var rep demo.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatalf("last line is not the report: %v\n%s", err, out)
	}
	t.Logf("demo: %d notifications, %d alerts, joins %+v", rep.Notifications, rep.Alerts, rep.Joins)
	if rep.Notifications != 30 || rep.Alerts != 30 || rep.Joins.Local != 30 {
		t.Errorf("demo: %d notifications, %d alerts, %d local joins; want 30, 30, 30", rep.Notifications, rep.Alerts, rep.Joins.Local)
	}
}

// TestSecureMTLSDemo: the README's mTLS example, on the SSL listener that
// requires client certificates.
func TestSecureMTLSDemo(t *testing.T) {
	s := requireSecure(t)
	if len(s.mtlsBrokers) == 0 || s.clientCertFile == "" || s.clientKeyFile == "" {
		t.Skipf("set %s, %s and %s for the mTLS listener", secureMTLSEnv, secureCertEnv, secureKeyEnv)
	}
	args := []string{"demo", "--brokers", strings.Join(s.mtlsBrokers, ","), "--json", "--timeout", "2m",
		"--tls-ca-file", s.caFile, "--tls-cert-file", s.clientCertFile, "--tls-key-file", s.clientKeyFile}
	code, out, took := joiner(t, 3*time.Minute, nil, args...)
	if code != 0 {
		t.Fatalf("joiner demo over mTLS: exit %d after %s:\n%s", code, took, out)
	}
	checkDemoReport(t, out)
	// Without the client certificate the listener refuses the handshake.
	code, out, took = joiner(t, 30*time.Second, nil, "loadgen", "--brokers", strings.Join(s.mtlsBrokers, ","), "--tls-ca-file", s.caFile)
	t.Logf("without a client certificate: exit %d in %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "TLS handshake failed") || !strings.Contains(out, "--tls-cert-file") {
		t.Errorf("loadgen without a client certificate: exit %d: %s", code, out)
	}
}

// TestSecureWorkersAndLoadgen: two `joiner run` workers and `joiner
// loadgen`, all over SASL_SSL, with a peer token and HTTPS between the
// workers. On 3 partitions the roundrobin plan puts every notification
// partition on the member that does not hold its market partition, so
// every join is a remote lookup over https carrying the token. Every
// notification gets an alert with the price of its symbol's tick, and the
// password and the token appear in no log (debug level) and on no HTTP
// endpoint.
func TestSecureWorkersAndLoadgen(t *testing.T) {
	s := requireSecure(t)
	dir := t.TempDir()
	// The workers' HTTP certificates come from a CA of the test's own.
	httpCA := kafkasectest.NewCA(t, dir, "http-ca")
	_, httpCert, httpKey := httpCA.Issue(t, dir, "worker-http")
	token := "tok-" + strings.Repeat("x", 8) + fmt.Sprint(time.Now().UnixNano())
	tokenFile := filepath.Join(dir, "peer-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := kafkasec.LoadCAFile(httpCA.File)
	if err != nil {
		t.Fatal(err)
	}
	httpsClient := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	const parts = 3
	c := newClusterOn(t, parts, &clusterNet{
		brokers:   s.brokers,
		transport: s.transport(t),
		runFlags: append(s.flags(), "--assignor", "roundrobin", "--log-level", "debug",
			"--peer-token-file", tokenFile, "--http-tls-cert-file", httpCert, "--http-tls-key-file", httpKey, "--http-tls-ca-file", httpCA.File),
		http:   httpsClient,
		scheme: "https",
		token:  token,
	})
	ws := []*worker{c.start("w1"), c.start("w2")}
	// The roundrobin plan splits tasks from state tasks, which waitStable
	// does not accept: wait for one generation, ready, with every
	// partition's state held once.
	c.poll("both workers ready in one generation", 60*time.Second, func() (bool, string) {
		var gen int32
		var state []int
		for i, w := range ws {
			v, err := w.view()
			switch {
			case err != nil:
				return false, err.Error()
			case i > 0 && v.Generation != gen:
				return false, "generations differ"
			case !v.Ready || v.Generation == 0:
				return false, w.id + " not ready"
			}
			gen = v.Generation
			state = append(state, v.StateTasks...)
			t.Logf("%s at generation %d: tasks %v, state tasks %v", w.id, v.Generation, v.Tasks, v.StateTasks)
		}
		slices.Sort(state)
		return slices.Equal(state, []int{0, 1, 2}), fmt.Sprintf("state tasks %v", state)
	})

	args := append([]string{"loadgen", "--brokers", strings.Join(s.brokers, ","), "--market-topic", c.market,
		"--notifications-topic", c.notifs, "--symbols", "10", "--ticks-per-symbol", "1", "--notifications-per-symbol", "3", "--run-id", "sec-"}, s.flags()...)
	code, out, took := joiner(t, time.Minute, nil, args...)
	if code != 0 {
		t.Fatalf("joiner loadgen: exit %d after %s:\n%s", code, took, out)
	}
	outputs := []string{out}

	// What loadgen wrote, read back: the notification ids and each
	// symbol's price.
	ids, prices := readInput(t, c)
	if len(ids) != 30 || len(prices) != 10 {
		t.Fatalf("read back %d notifications and %d prices, want 30 and 10", len(ids), len(prices))
	}
	c.waitAlerts(ids, time.Minute)
	c.checkPrices(ids, prices)
	res := c.alerts.results()
	t.Logf("alerts by result: %v", res)
	if res[record.ResultRemote] < 30 || res[record.ResultMiss] != 0 {
		t.Errorf("alerts by result %v: want every join remote (a lookup over https with the token), no miss", res)
	}

	// Every HTTP endpoint of every worker, with the token where needed.
	for _, w := range ws {
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/v1/assignment", "/v1/prices/BBCA"} {
			code, body := httpGet(t, httpsClient, "https://"+w.addr+path, token)
			if code != http.StatusOK && !(path == "/v1/prices/BBCA" && code == http.StatusMisdirectedRequest) {
				t.Errorf("GET %s of %s with the token: %d %s", path, w.id, code, body)
			}
			outputs = append(outputs, body)
		}
		if code, _ := httpGet(t, httpsClient, "https://"+w.addr+"/v1/assignment", ""); code != http.StatusUnauthorized {
			t.Errorf("GET /v1/assignment of %s without the token: %d, want 401", w.id, code)
		}
		_, metrics := httpGet(t, httpsClient, "https://"+w.addr+"/metrics", "")
		if !regexp.MustCompile(`joiner_http_unauthorized_total\{reason="missing"\} [1-9]`).MatchString(metrics) {
			t.Errorf("%s: the 401 is not counted in joiner_http_unauthorized_total", w.id)
		}
	}
	c.stopAll(ws)
	for _, w := range ws {
		b, err := os.ReadFile(w.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"level":"DEBUG"`)) {
			t.Errorf("%s logged nothing at debug level; the check below would be vacuous", w.id)
		}
		outputs = append(outputs, string(b))
	}
	for i, o := range outputs {
		if strings.Contains(o, s.password) {
			t.Errorf("output %d holds the SASL password", i)
		}
		if strings.Contains(o, token) {
			t.Errorf("output %d holds the peer token", i)
		}
	}
}

func httpGet(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// readInput reads the cluster's notifications and market topics from the
// start: the notification ids, and the last price of each symbol.
func readInput(t *testing.T, c *cluster) (ids []string, prices map[string]float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prices = map[string]float64{}
	for _, topic := range []string{c.notifs, c.market} {
		r := testkit.NewTopicReader(c.client, topic, c.partitions)
		for empty := 0; empty < 3; {
			n, err := r.Poll(ctx, func(_ kafka.Record, v []byte) {
				var rec struct {
					ID     string   `json:"id"`
					Symbol string   `json:"symbol"`
					Price  *float64 `json:"price"`
				}
				if json.Unmarshal(v, &rec) != nil {
					return
				}
				if topic == c.notifs {
					ids = append(ids, rec.ID)
				} else if rec.Price != nil {
					prices[rec.Symbol] = *rec.Price
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				empty++
			}
		}
	}
	slices.Sort(ids)
	return ids, prices
}

// TestSecureFailures: a wrong password, a wrong CA and a plaintext client
// each make `joiner run` and `joiner loadgen` exit 1 within 10s with an
// error that names the cause, and never the password.
func TestSecureFailures(t *testing.T) {
	s := requireSecure(t)
	dir := t.TempDir()
	wrongCA := kafkasectest.NewCA(t, dir, "wrong-ca")
	wrongPassword := "not-the-" + s.password
	brokersFlag := strings.Join(s.brokers, ",")
	for _, tc := range []struct {
		name  string
		env   []string
		flags []string
		want  []string
	}{
		{"wrong password", []string{kafkasec.PasswordEnv + "=" + wrongPassword},
			[]string{"--tls-ca-file", s.caFile, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", s.user},
			[]string{"authentication failed", "SCRAM-SHA-512", fmt.Sprintf("%q", s.user)}},
		{"wrong CA", nil,
			[]string{"--tls-ca-file", wrongCA.File, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", s.user, "--sasl-password-file", s.passwordFile},
			[]string{"TLS handshake failed", s.brokers[0], "unknown authority"}},
		{"plaintext client", nil, nil, []string{"plaintext", s.brokers[0], "--tls"}},
	} {
		for _, cmd := range []string{"run", "loadgen"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				args := append([]string{cmd, "--brokers", brokersFlag}, tc.flags...)
				if cmd == "run" {
					args = append(args, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--log-level", "debug", "--group", "joiner-secure-failures")
				}
				code, out, took := joiner(t, 30*time.Second, tc.env, args...)
				t.Logf("exit %d in %s: %s", code, took.Round(time.Millisecond), lastLine(out))
				if code != 1 {
					t.Errorf("exit %d, want 1:\n%s", code, out)
				}
				if took > 10*time.Second {
					t.Errorf("took %s, want under 10s", took)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("output does not say %q:\n%s", w, out)
					}
				}
				for _, secret := range []string{s.password, wrongPassword} {
					if strings.Contains(out, secret) {
						t.Errorf("output holds a password:\n%s", out)
					}
				}
			})
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
