// Package ratelimitheaders is a Traefik middleware (a local plugin) that copies headers from
// the request onto the response. Placed after forwardAuth, which puts Floodgate's RateLimit
// and RateLimit-Policy on the request to the app, it shows them to the client too.
package ratelimitheaders

import (
	"context"
	"net/http"
)

// Config names the headers to copy.
type Config struct {
	Headers []string `json:"headers,omitempty"`
}

// CreateConfig gives the default configuration: RateLimit and RateLimit-Policy.
func CreateConfig() *Config {
	return &Config{Headers: []string{"RateLimit", "RateLimit-Policy"}}
}

type copier struct {
	next    http.Handler
	headers []string
}

// New makes the middleware.
func New(_ context.Context, next http.Handler, config *Config, _ string) (http.Handler, error) {
	return &copier{next: next, headers: config.Headers}, nil
}

func (c *copier) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	for _, name := range c.headers {
		if values := req.Header.Values(name); len(values) > 0 {
			rw.Header()[http.CanonicalHeaderKey(name)] = values
		}
	}
	c.next.ServeHTTP(rw, req)
}
