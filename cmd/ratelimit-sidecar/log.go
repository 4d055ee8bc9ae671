package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var e zapcore.Encoder
	switch format {
	case "json":
		e = zapcore.NewJSONEncoder(enc)
	case "console":
		e = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("-log-format %q: want json or console", format)
	}
	return zap.New(zapcore.NewCore(e, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}
