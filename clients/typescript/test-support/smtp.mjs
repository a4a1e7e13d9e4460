// A mail sent over SMTP with nothing but node:net: what the suite's Python tests do with
// smtplib, for the client's own tests.
import net from "node:net";

export function sendMail({ host = "127.0.0.1", port, from = "service@example.com", to, raw }) {
  const data = raw.replace(/\r?\n/g, "\r\n").replace(/^\./gm, "..");
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const steps = [`EHLO client.test`, `MAIL FROM:<${from}>`, `RCPT TO:<${to}>`, "DATA",
      (data.endsWith("\r\n") ? data : data + "\r\n") + ".", "QUIT"];
    let buffer = "";
    socket.setTimeout(10_000, () => socket.destroy(new Error("SMTP timed out")));
    socket.on("error", reject);
    socket.on("data", chunk => {
      buffer += chunk.toString();
      // A reply is complete at a line "NNN text" (not "NNN-text").
      const lines = buffer.split("\r\n");
      const last = lines[lines.length - 2];
      if (!last || !/^\d{3} /.test(last)) {
        return;
      }
      buffer = "";
      if (!/^[23]/.test(last)) {
        socket.destroy();
        reject(new Error(`SMTP refused: ${last}`));
        return;
      }
      const step = steps.shift();
      if (step === undefined) {
        socket.end();
        resolve();
        return;
      }
      socket.write(step + "\r\n");
    });
  });
}

export function mail({ to, subject, text, from = "service@example.com" }) {
  return `From: ${from}\nTo: ${to}\nSubject: ${subject}\nMessage-ID: <${Date.now()}.${Math.random()}@example.com>\n`
    + `Content-Type: text/plain; charset=utf-8\n\n${text}\n`;
}
