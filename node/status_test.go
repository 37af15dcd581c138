package node

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestStatusPageLogin: with a peer token, a browser without it gets the
// login form on /; POSTing the right token to /login sets an HttpOnly
// cookie that opens / and /v1/status but not the peer API, and the token
// is never in a page, a redirect or the cookie.
func TestStatusPageLogin(t *testing.T) {
	h, reg := tokenHandler(t)
	do := func(req *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if strings.Contains(rec.Body.String(), "s3cret") || strings.Contains(rec.Header().Get("Location"), "s3cret") ||
			strings.Contains(rec.Header().Get("Set-Cookie"), "s3cret") {
			t.Errorf("%s %s: the answer holds the token", req.Method, req.URL)
		}
		return rec
	}
	form := func(token string) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}

	rec := do(httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `<form method="post" action="/login">`) {
		t.Fatalf("GET / without the token: %d %q, want 401 with the login form", rec.Code, rec.Body)
	}
	if rec := do(httptest.NewRequest(http.MethodGet, "/login?token=s3cret-token", nil)); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /login with the token in the URL: %d, want 405", rec.Code)
	}
	before := rejected(t, reg, "invalid")
	rec = do(form("wrong"))
	if rec.Code != http.StatusUnauthorized || rec.Header().Get("Set-Cookie") != "" || !strings.Contains(rec.Body.String(), "not this worker") {
		t.Errorf("POST /login with a wrong token: %d, cookie %q", rec.Code, rec.Header().Get("Set-Cookie"))
	}
	if got := rejected(t, reg, "invalid"); got != before+1 {
		t.Errorf("a wrong login counted %v invalid, want %v", got, before+1)
	}
	rec = do(form("s3cret-token"))
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/" {
		t.Fatalf("POST /login with the token: %d to %q, want 303 to /", rec.Code, rec.Header().Get("Location"))
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Value == "" {
		t.Fatalf("login cookie %+v, want one HttpOnly SameSite=Strict cookie", cookies)
	}
	for _, tc := range []struct {
		path string
		want int
	}{{"/", 200}, {"/v1/status", 200}, {"/v1/assignment", 401}, {"/v1/prices/BBCA", 401}} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.AddCookie(cookies[0])
		if rec := do(req); rec.Code != tc.want {
			t.Errorf("GET %s with the cookie: %d, want %d", tc.path, rec.Code, tc.want)
		}
	}
	forged := httptest.NewRequest(http.MethodGet, "/", nil)
	forged.AddCookie(&http.Cookie{Name: cookies[0].Name, Value: strings.Repeat("0", len(cookies[0].Value))})
	if rec := do(forged); rec.Code != http.StatusUnauthorized {
		t.Errorf("GET / with a forged cookie: %d, want 401", rec.Code)
	}
	bearer := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
	bearer.Header.Set("Authorization", "Bearer s3cret-token")
	if rec := do(bearer); rec.Code != 200 {
		t.Errorf("GET /v1/status with the bearer token: %d", rec.Code)
	}
}
