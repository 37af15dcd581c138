// Package kafkasectest starts an embedded Kafka broker (kfake) with TLS and
// SASL for tests, with a throwaway CA made in memory and written to a test
// directory. It is the unit-test counterpart of scripts/kafka-secure.
package kafkasectest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// File is the CA certificate in PEM.
	File string
}

// NewCA makes a CA and writes its certificate to dir/name.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, File: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for 127.0.0.1 and localhost, valid for
// server and client use, and writes it and its key to dir/name.pem and
// dir/name.key.
func (ca *CA) Issue(t testing.TB, dir, name string) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial := make([]byte, 8)
	_, _ = rand.Read(serial)
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetBytes(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert, certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Cluster is a running TLS + SASL broker and the files a client needs.
type Cluster struct {
	*kfake.Cluster
	Addr string
	// CA signed the broker's certificate; WrongCA did not.
	CA, WrongCA *CA
	// Mechanism, User and Password are the SASL credentials;
	// PasswordFile holds Password.
	Mechanism, User, Password, PasswordFile string
	Dir                                     string
}

// Start starts a single-broker cluster that requires TLS and SASL
// SCRAM-SHA-512, with a random password, and stops it at the end of the
// test. opts are added to kfake's options (e.g. kfake.SeedTopics).
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := &Cluster{Dir: dir, Mechanism: "SCRAM-SHA-512", User: "joiner"}
	c.CA = NewCA(t, dir, "ca")
	c.WrongCA = NewCA(t, dir, "wrong-ca")
	serverCert, _, _ := c.CA.Issue(t, dir, "broker")
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	c.Password = "pw-" + hex.EncodeToString(pw)
	c.PasswordFile = filepath.Join(dir, "sasl-password")
	if err := os.WriteFile(c.PasswordFile, []byte(c.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(500 * time.Millisecond),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser(c.Mechanism, c.User, c.Password),
	}, opts...)...)
	if err != nil {
		t.Fatalf("starting the TLS + SASL test broker: %v", err)
	}
	t.Cleanup(kc.Close)
	c.Cluster = kc
	c.Addr = kc.ListenAddrs()[0]
	return c
}

// Flags are the joiner flags that connect to the cluster.
func (c *Cluster) Flags() []string {
	return []string{"--tls-ca-file", c.CA.File, "--sasl-mechanism", c.Mechanism, "--sasl-username", c.User, "--sasl-password-file", c.PasswordFile}
}
