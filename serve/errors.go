package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error types of the OpenAI API's error shape.
const (
	invalidRequest = "invalid_request_error"
	serverError    = "server_error"
)

// apiError is an error answered in the OpenAI API's shape:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
type apiError struct {
	status  int
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

// badRequest is a 400 invalid_request_error about param ("" for none).
func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{status: http.StatusBadRequest, Type: invalidRequest, Message: fmt.Sprintf(format, args...)}
	if param != "" {
		e.Param = param
	}
	return e
}

// write answers the request with e.
func (e *apiError) write(w http.ResponseWriter) {
	if p, ok := e.Param.(string); ok && p == "" {
		e.Param = nil
	}
	if c, ok := e.Code.(string); ok && c == "" {
		e.Code = nil
	}
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
