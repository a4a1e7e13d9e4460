import type { components } from "./schema.js";
type Schemas = components["schemas"];
export type Mailbox = Schemas["Mailbox"];
export type MailboxCreated = Schemas["MailboxCreated"];
export type MessageSummary = Schemas["MessageSummary"];
export type Message = Schemas["MessageDetail"];
export type Sent = Schemas["SendAccepted"];
export type Thread = Schemas["Thread"];
export type ThreadDetail = Schemas["ThreadDetail"];
export type HtmlCheck = Schemas["HtmlCheck"];
export type LinkCheck = Schemas["LinkCheck"];
export type SpamCheck = Schemas["SpamCheck"];
export type HeaderCheck = Schemas["HeaderCheck"];
export type ErrorBody = Schemas["Error"];
/** One recipient of a sent message, and what became of it (docs/delivery.md). */
export type Delivery = Schemas["Delivery"];
export type Suppression = Schemas["Suppression"];
/** A sandbox's SMTP settings: `host`, `port`, `username`, `password` (shown once), `security`. */
export type SmtpSettings = Schemas["SmtpSettings"];
/** The SMTP envelope of a message a sandbox caught: `mail_from` and every `rcpt_to`, Bcc included. */
export type Envelope = Schemas["Envelope"];
/** A fault rule as set (docs/sandbox.md, "Faults on demand"). */
export type FaultRule = Schemas["FaultRule"];
/** A fault rule as Relay shows it: with `remaining`, what is left of `times` (null without one). */
export type FaultRuleShown = Schemas["FaultRuleShown"];
/** A sandbox's mailbox with its new SMTP settings, after `rotateSmtpPassword`. */
export type SandboxPassword = Schemas["SandboxPassword"];
/** A sandbox just made (docs/sandbox.md): its mailbox's fields, and `smtp`, the settings an
 * app submits with, the password among them (shown this once). */
export type Sandbox = MailboxCreated & {
    smtp: SmtpSettings;
};
/** What waitForDelivery answers: every recipient's state, and whether all are final. */
export interface DeliveryWaited {
    delivery: Delivery[];
    final: boolean;
}
export type { components, paths, operations } from "./schema.js";
/** A check that could not run on this Relay: `"not_configured: …"`, `"backend_unavailable: …"`. */
export interface CheckFailed {
    error: string;
}
export type CheckName = "html" | "links" | "spam" | "headers";
export interface Checks {
    html?: HtmlCheck | CheckFailed;
    links?: LinkCheck | CheckFailed;
    spam?: SpamCheck | CheckFailed;
    headers?: HeaderCheck | CheckFailed;
}
/** An event of a mailbox's stream: `message` (data: the new message's summary) or `expired`. */
export interface RelayEvent {
    event: string;
    id: string | null;
    data: unknown;
}
export interface RelayOptions {
    /** Relay's root URL (as RELAY_URL); `/api/v1` is added. */
    baseUrl?: string;
    /** An API key, a mailbox token or an OAuth access token (as RELAY_API_KEY). */
    apiKey?: string;
    /** Seconds one request may take (a held wait gets its wait on top). Default 30. */
    timeoutSeconds?: number;
    /** Times a 429 or 503 is retried after its Retry-After. Default 3. */
    retries?: number;
    /** Another `fetch` (a proxy's, a test's); the platform's by default. */
    fetch?: typeof fetch;
}
export interface CallOptions {
    signal?: AbortSignal;
    timeoutSeconds?: number;
}
export interface WaitOptions {
    /** Seconds to wait at most. Default 30. */
    timeoutSeconds?: number;
    from?: string;
    subject?: string;
    /** Only messages received after this message id (one of the mailbox's). */
    after?: number;
    /** Only mail whose sender is proven (verdict pass). */
    authenticated?: boolean;
    /** Only mail with this envelope recipient, the whole address in any case (a sandbox's
     * catch: any of its RCPT TO, so a Bcc too; other mail: the address it came to). */
    rcpt?: string;
    signal?: AbortSignal;
}
export interface CreateMailboxOptions extends CallOptions {
    ttlMinutes?: number;
    localPart?: string;
    name?: string;
    tags?: string[];
    domain?: string;
}
export interface CreateSandboxOptions extends CallOptions {
    ttlMinutes?: number;
    localPart?: string;
}
export interface AttachmentIn {
    filename: string;
    contentType: string;
    content: Uint8Array | string;
}
export interface SendOptions extends CallOptions {
    to: string[];
    subject: string;
    text: string;
    html?: string;
    cc?: string[];
    bcc?: string[];
    replyTo?: string;
    attachments?: AttachmentIn[];
}
/** An error answer of the API: `code` is the API's (`not_found`, `expired`, …), `status` the HTTP status. */
export declare class RelayError extends Error {
    readonly code: string;
    readonly status: number;
    readonly fields: Record<string, string[]>;
    constructor(code: string, message: string, status: number, fields?: Record<string, string[]>);
}
/** A wait ran out before what it waited for arrived. */
export declare class WaitTimeout extends Error {
    constructor(message: string);
}
export declare class Relay {
    readonly apiUrl: string;
    readonly timeoutSeconds: number;
    readonly retries: number;
    private readonly apiKey;
    private readonly fetch;
    constructor(options?: RelayOptions);
    private request;
    private json;
    private bytes;
    private allPages;
    createMailbox(options?: CreateMailboxOptions): Promise<MailboxCreated>;
    listMailboxes(options?: CallOptions & {
        includeExpired?: boolean;
    }): Promise<Mailbox[]>;
    getMailbox(mailboxId: string, options?: CallOptions): Promise<Mailbox>;
    renewMailbox(mailboxId: string, options?: CallOptions & {
        ttlMinutes?: number;
    }): Promise<Mailbox>;
    deleteMailbox(mailboxId: string, options?: CallOptions): Promise<true>;
    /** A sandbox: a mailbox that also catches every mail an app submits with its SMTP settings
     * (`smtp`), to anyone, delivering none (docs/sandbox.md). */
    createSandbox(options?: CreateSandboxOptions): Promise<Sandbox>;
    /** A new SMTP password for a sandbox, in its new `smtp` settings; the old one fails at once. */
    rotateSmtpPassword(mailboxId: string, options?: CallOptions): Promise<SandboxPassword>;
    /** Replace a sandbox's fault rules; resolves to them, each with `remaining`. */
    setFaults(mailboxId: string, rules: FaultRule[], options?: CallOptions): Promise<FaultRuleShown[]>;
    /** A sandbox's fault rules, each with `remaining` (what is left of `times`). */
    getFaults(mailboxId: string, options?: CallOptions): Promise<FaultRuleShown[]>;
    /** Remove every fault rule of a sandbox. */
    clearFaults(mailboxId: string, options?: CallOptions): Promise<true>;
    listMessages(mailboxId: string, options?: CallOptions & {
        query?: string;
        unread?: boolean;
        authenticated?: boolean;
        direction?: "in" | "out";
        rcpt?: string;
    }): Promise<MessageSummary[]>;
    getMessage(mailboxId: string, messageId: number, options?: CallOptions): Promise<Message>;
    /** The message exactly as received (`message/rfc822`). */
    getRaw(mailboxId: string, messageId: number, options?: CallOptions): Promise<Uint8Array>;
    getAttachment(mailboxId: string, messageId: number, attachmentId: number, options?: CallOptions): Promise<Uint8Array>;
    searchMessages(query: string, options?: CallOptions & {
        mailboxId?: string;
    }): Promise<MessageSummary[]>;
    /** The oldest message after `after` that matches, held up to `wait` seconds. */
    private firstAfter;
    /** The first message matching the filters received after `after` (one already there
     * counts), as soon as it arrives; null if none came in time. */
    waitForMessage(mailboxId: string, options?: WaitOptions): Promise<Message | null>;
    /** The most likely code of the first matching message that has one (messages without a
     * code are passed over); rejects with WaitTimeout if none came in time. */
    waitForCode(mailboxId: string, options?: WaitOptions): Promise<string>;
    sendMessage(mailboxId: string, options: SendOptions): Promise<Sent>;
    replyToMessage(mailboxId: string, messageId: number, options: CallOptions & {
        text: string;
        html?: string;
        replyAll?: boolean;
        attachments?: AttachmentIn[];
    }): Promise<Sent>;
    forwardMessage(mailboxId: string, messageId: number, options: CallOptions & {
        to: string[];
        text?: string;
    }): Promise<Sent>;
    /** Send a message the mailbox caught on, exactly as it was caught, to `to` and no one else
     * (not its own To, Cc or Bcc), behind Resent-From/-To/-Date/-Message-ID headers
     * (docs/sandbox.md, "Release"). A send like sendMessage, in its limits: its `message_id` is
     * the copy kept, for waitForDelivery. A copy of mail the mailbox sent is a `conflict`
     * RelayError (409); an anonymous sandbox's token, `forbidden` (403). */
    releaseMessage(mailboxId: string, messageId: number, to: string | string[], options?: CallOptions): Promise<Sent>;
    /** What became of a message the mailbox sent (`messageId`: the `message_id` sendMessage,
     * replyToMessage, forwardMessage or releaseMessage gave), once every recipient is final
     * (sent, failed, bounced, complained) or `timeoutSeconds` (default 30) pass: then `final`
     * is false, not an error. Rejects with a not_found RelayError for a message the mailbox received. */
    waitForDelivery(mailboxId: string, messageId: number, options?: {
        timeoutSeconds?: number;
        signal?: AbortSignal;
    }): Promise<DeliveryWaited>;
    /** Addresses the account's mail no longer goes to (they bounced or complained). */
    listSuppressions(options?: CallOptions): Promise<Suppression[]>;
    /** Send to `address` again. */
    deleteSuppression(address: string, options?: CallOptions): Promise<true>;
    listThreads(mailboxId: string, options?: CallOptions): Promise<Thread[]>;
    getThread(mailboxId: string, threadId: number, options?: CallOptions): Promise<ThreadDetail>;
    /** Relay's checks of a message (docs/checks.md), each as the API answers it; a links
     * check is started and polled until done or `linksTimeoutSeconds` pass. A check that
     * cannot run there is `{error: "not_configured: …"}` or the like. */
    checkMessage(mailboxId: string, messageId: number, options?: CallOptions & {
        checks?: CheckName[];
        linksTimeoutSeconds?: number;
    }): Promise<Checks>;
    /** The mailbox's event stream: each new message, then `expired` when it ends. A dropped
     * connection is resumed after the last event seen (or after `lastEventId`). */
    events(mailboxId: string, options?: {
        lastEventId?: string;
        signal?: AbortSignal;
    }): AsyncGenerator<RelayEvent>;
}
/** Whether a webhook delivery is Relay's (Standard Webhooks: `webhook-id`,
 * `webhook-timestamp`, `webhook-signature`) and recent. */
export declare function verifyWebhook(body: string | Uint8Array, headers: Headers | Record<string, string>, secret: string, toleranceSeconds?: number): boolean;
/** A mailbox bound to its client, as the fixtures hand it out. */
export interface BoundMailbox {
    readonly id: string;
    readonly address: string;
    readonly expiresAt: Date;
    readonly relay: Relay;
    waitForCode(options?: WaitOptions): Promise<string>;
    waitForMessage(options?: WaitOptions): Promise<Message | null>;
    listMessages(): Promise<MessageSummary[]>;
    getMessage(messageId: number): Promise<Message>;
    events(options?: {
        lastEventId?: string;
        signal?: AbortSignal;
    }): AsyncGenerator<RelayEvent>;
    delete(): Promise<void>;
}
export declare function bind(relay: Relay, mailbox: Mailbox): BoundMailbox;
/** A sandbox bound to its client, as the `relaySandbox` fixture hands it out: a bound
 * mailbox with its SMTP settings and its fault rules. */
export interface BoundSandbox extends BoundMailbox {
    /** The SMTP settings an app submits with, the password among them; `rotateSmtpPassword()` replaces them. */
    readonly smtp: SmtpSettings;
    /** A new password: resolves to the new settings, which `smtp` is from then on. */
    rotateSmtpPassword(): Promise<SmtpSettings>;
    setFaults(rules: FaultRule[]): Promise<FaultRuleShown[]>;
    getFaults(): Promise<FaultRuleShown[]>;
    clearFaults(): Promise<true>;
    /** Send a message this sandbox caught on to `to` alone: `Relay.releaseMessage`. */
    release(messageId: number, to: string | string[]): Promise<Sent>;
}
export declare function bindSandbox(relay: Relay, sandbox: Sandbox): BoundSandbox;
/** `fn`'s result with `mailbox`, which is deleted afterwards whether `fn` passes or throws:
 * `withMailbox`, `withSandbox` and the Playwright fixtures. */
export declare function deletedAfter<M extends BoundMailbox, T>(mailbox: M, fn: (mailbox: M) => Promise<T> | T): Promise<T>;
/** Run `fn` with a fresh mailbox, deleted afterwards whether `fn` passes or throws: for
 * Vitest, Jest, node:test or a script. The client comes from RELAY_URL/RELAY_API_KEY unless given. */
export declare function withMailbox<T>(fn: (mailbox: BoundMailbox) => Promise<T> | T, options?: CreateMailboxOptions & {
    relay?: Relay;
}): Promise<T>;
/** Run `fn` with a fresh sandbox, deleted afterwards whether `fn` passes or throws (as
 * `withMailbox`). The client comes from RELAY_URL/RELAY_API_KEY unless given. */
export declare function withSandbox<T>(fn: (sandbox: BoundSandbox) => Promise<T> | T, options?: CreateSandboxOptions & {
    relay?: Relay;
}): Promise<T>;
