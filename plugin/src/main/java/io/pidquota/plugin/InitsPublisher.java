package io.pidquota.plugin;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the plug-in sees, published: a line of JSON to pidquota's inits topic for each
 * InitProducerId this broker answers, which pidquota reads as its input
 * ({@code --input-format plugin-inits}) instead of the request log at DEBUG.
 *
 * <p>One init, one line:
 * <pre>
 * {"v":1,"at_ms":1764000000123,"broker":1,"run":"5f3a9c...","seq":42,"principal":"User:alice",
 *  "client_id":"app-1","client_address":"10.0.0.5","listener":"SASL_SSL","transactional_id":null,
 *  "outcome":"granted","software":"apache-kafka-java 3.9.1"}
 * </pre>
 * {@code outcome} is {@code granted}, {@code refused} (pidquota's rule) or {@code denied} (Kafka's
 * ACLs). {@code run} is random at each start of the plug-in and {@code seq} counts its inits from 0,
 * so {@code (broker, run, seq)} names one request for ever: a line sent twice (a retry) is the
 * same init, and pidquota counts it once; a gap in {@code seq} is an init not published.
 *
 * <p>On the request thread, {@link #offer} only stores references in a bounded queue (at most
 * {@code CAPACITY} inits, {@code BATCH} more gathered on the publisher's thread, and
 * {@code MAX_CHARS} characters of text in all: a few MiB whatever the requests hold) and never
 * blocks or throws: a full queue drops the init, counts it and says so
 * once. A daemon thread of its own wakes at an init and sends on a budget: one send a
 * {@code GATHER_MS} on average, at most {@code BURST} at once after a quiet spell (a token bucket
 * of sends), the last of them kept for a granted init. An init that finds a send in the budget
 * goes at once, the rest are gathered until the next one is due. It sends as
 * one record per principal (its key: a principal's inits keep their order, one request in
 * flight), its inits a line each, through one producer ({@code acks=all}, uncompressed, a buffer
 * of {@code BUFFER} bytes) made only once the topic exists (pidquota makes it; a producer would
 * have the broker make it as a plain topic). The cost is per send, not per init (the producer's
 * request, the broker's handling of it): sent a record per init, a 600-inits/s flood cost the
 * broker 1.2x its CPU; a send each 200 ms, its two threads ~12 ms of CPU a second, at 20 inits/s
 * as at 600; each 500 ms, ~8 ms. Worked example: a crash loop's 500 inits a second make 2 records
 * a second of 250 lines each (~75 kB), as {@code BURST} sends at its start and then one each
 * 500 ms; a crash loop's 2 inits a second each go as they come (2 sends a second, within the
 * budget), where a send at most each 500 ms kept one of them waiting up to 0.5 s; the request
 * threads do an offer each (~1 µs).
 */
final class InitsPublisher implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(InitsPublisher.class);
    static final int CAPACITY = 10_000;
    static final int MAX_CHARS = 1 << 21;
    static final int LINGER_MS = 0;
    static final int GATHER_MS = 500;
    static final long GATHER_NANOS = GATHER_MS * 1_000_000L;
    static final int BURST = 4;
    static final int RECORD_CHARS = 256 * 1024;
    static final int BUFFER = 4 << 20;
    static final int BATCH = 1000;

    enum Outcome { GRANTED, REFUSED, DENIED }

    /** One init as the request thread saw it: references only, made into text on the publisher's
     * thread. */
    static final class Seen {
        final long atMs;
        final long seq;
        final String principal;
        final String clientId;
        final InetAddress address;
        final String listener;
        final String transactionalId;
        final Outcome outcome;
        final String software;
        final int chars;

        Seen(long atMs, long seq, String principal, String clientId, InetAddress address,
             String listener, String transactionalId, Outcome outcome, String software) {
            this.atMs = atMs;
            this.seq = seq;
            this.principal = principal;
            this.clientId = clientId;
            this.address = address;
            this.listener = listener;
            this.transactionalId = transactionalId;
            this.outcome = outcome;
            this.software = software;
            this.chars = 64 + len(principal) + len(clientId) + len(listener) + len(transactionalId) + len(software);
        }
    }

    private final String topic;
    private final int brokerId;
    private final String run = Long.toHexString(ThreadLocalRandom.current().nextLong() | Long.MIN_VALUE);
    private final Properties props = new Properties();
    private final ArrayBlockingQueue<Seen> queue = new ArrayBlockingQueue<>(CAPACITY);
    private final AtomicLong chars = new AtomicLong();
    private final AtomicLong seq = new AtomicLong();
    private final AtomicLong published = new AtomicLong();
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final Thread thread;
    private volatile boolean ready;
    private volatile boolean running = true;
    private volatile boolean droppedSaid;
    private KafkaProducer<byte[], byte[]> producer;
    private boolean broken;
    private long brokenAt;
    static final long REMAKE_NANOS = 60_000_000_000L;
    /** The sends in the budget, in nanoseconds of {@code GATHER_NANOS} each: full at the start. */
    private long credit = BURST * GATHER_NANOS;
    private long creditAt = System.nanoTime();
    private int inARow;
    private boolean warned;

    InitsPublisher(String topic, int brokerId, Map<String, Object> clientConfigs, String name) {
        this.topic = topic;
        this.brokerId = brokerId;
        props.putAll(StatusReporter.producerBase(clientConfigs, name + "-inits"));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "2000");  // its own thread's wait, never a request's
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Integer.toString(BUFFER));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");  // no PID: (run, seq) dedupes
        props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");  // order kept on retry
        props.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(LINGER_MS));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(256 * 1024));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");  // read with no codec: ~150 kB/s at 500 inits/s
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        // a retry is a WARN line of the producer's own in the broker's log: a second apart, not 100 ms
        props.putIfAbsent(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "1000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        this.thread = new Thread(this, name + "-inits");
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    String topic() {
        return topic;
    }

    /** Whether the topic exists (the state reader's check, every few seconds). */
    void ready(boolean exists) {
        ready = exists;
    }

    long published() {
        return published.get();
    }

    long dropped() {
        return dropped.get();
    }

    long failed() {
        return failed.get();
    }

    int queued() {
        return queue.size();
    }

    /** A request thread's init, queued if there is room; never blocks, never throws. */
    void offer(AuthorizableRequestContext context, String transactionalId, Outcome outcome) {
        if (!ready || !running) {
            return;
        }
        try {
            Seen s = new Seen(System.currentTimeMillis(), seq.getAndIncrement(),
                PidQuotaAuthorizer.nameOf(context.principal()),
                context.clientId(), context.clientAddress(), context.listenerName(), transactionalId, outcome,
                software(context));
            if (chars.addAndGet(s.chars) > MAX_CHARS || !queue.offer(s)) {
                chars.addAndGet(-s.chars);
                drop();
            }
        } catch (RuntimeException | LinkageError e) {
            drop();
        }
    }

    private void drop() {
        dropped.incrementAndGet();
        if (!droppedSaid) {
            droppedSaid = true;
            LOG.warn("pidquota plug-in: its queue of inits for {} is full: inits are dropped, not published "
                + "(said once; counted in InitsDropped)", topic);
        }
    }

    /** The client's software (KIP-511) where the broker's context carries it, else null. */
    static String software(AuthorizableRequestContext context) {
        if (!(context instanceof RequestContext)) {
            return null;
        }
        org.apache.kafka.common.network.ClientInformation info = ((RequestContext) context).clientInformation;
        if (info == null) {
            return null;
        }
        String name = info.softwareName();
        String version = info.softwareVersion();
        boolean n = name != null && !name.equals("unknown");
        boolean v = version != null && !version.equals("unknown");
        return n && v ? name + " " + version : n ? name : v ? version : null;
    }

    @Override
    public void run() {
        List<Seen> batch = new ArrayList<>(BATCH);
        while (running) {
            try {
                Seen first = queue.poll(200, TimeUnit.MILLISECONDS);
                if (!ready && producer != null) {  // the topic gone: no metadata request may make it again
                    closeProducer();
                }
                if (first == null) {
                    continue;
                }
                batch.add(first);
                // one send a GATHER_MS on average: a flood's inits go a few times a second, gathered
                // (the producer's cost is per send, not per init); one that finds a send in the
                // budget goes at once
                boolean granted = first.outcome == Outcome.GRANTED;
                // a full batch goes as a granted one would: no init waits behind it for long
                for (long wait; (wait = take(System.nanoTime(), granted || batch.size() >= BATCH)) > 0; ) {
                    if (granted || batch.size() >= BATCH) {
                        TimeUnit.NANOSECONDS.sleep(wait);
                    } else {  // refused or denied inits wait for a granted one, or for their turn
                        Seen next = queue.poll(wait, TimeUnit.NANOSECONDS);
                        if (next != null) {
                            batch.add(next);
                            granted = next.outcome == Outcome.GRANTED;
                        }
                    }
                }
                sendWaiting(batch);
            } catch (InterruptedException e) {  // closing: what it gathered is counted, not sent
                failed.addAndGet(batch.size());
                return;
            } finally {
                batch.clear();
            }
        }
    }

    /** A send taken from the budget at {@code now} (0), or the nanoseconds until one is in it. The
     * budget gains a send each {@code GATHER_NANOS} and holds at most {@code BURST}; a send of
     * inits that were all refused or denied leaves one in it for a {@code granted} init, the only
     * kind pidquota counts (a throttled crash loop's retries must not keep a new offender's inits
     * waiting). */
    long take(long now, boolean granted) {
        long since = now - creditAt;  // a difference of nanoTime()s, as its contract asks
        if (since > 0) {
            credit += Math.min(since, BURST * GATHER_NANOS - credit);
            creditAt = now;
        }
        long need = granted ? GATHER_NANOS : 2 * GATHER_NANOS;
        if (credit < need) {
            return need - credit;
        }
        credit -= GATHER_NANOS;
        return 0;
    }

    /** {@code batch} and all that waits in the queue, {@code BATCH} at a time: a send every
     * {@code GATHER_MS} must not cap the rate (a batch per send would drop a flood of over 2,000
     * inits a second); at most {@code CAPACITY} inits a send, whatever keeps coming. */
    void sendWaiting(List<Seen> batch) {
        for (int chunk = 0; chunk * BATCH < CAPACITY && (chunk == 0 || !queue.isEmpty()); chunk++) {
            queue.drainTo(batch, BATCH - batch.size());
            for (Seen s : batch) {
                chars.addAndGet(-s.chars);  // every one, before any send can throw
            }
            if (ready) {
                publish(batch);
            } else {  // the topic went while it waited: a producer's metadata request would make it
                failed.addAndGet(batch.size());
            }
            batch.clear();
        }
    }

    /** A gathered batch as few records as can be: one per principal (its key), each a line of JSON
     * per init, in order, up to {@code RECORD_CHARS} a record. A flood's producer sends one
     * record where it would send dozens: the producer's own work is per record, not per byte. */
    private void publish(List<Seen> batch) {
        Map<String, StringBuilder> lines = new LinkedHashMap<>();
        Map<String, int[]> counts = new HashMap<>();
        for (Seen s : batch) {
            try {
                StringBuilder b = lines.get(s.principal);
                if (b != null && b.length() + s.chars > RECORD_CHARS) {
                    send(s.principal, b, counts.remove(s.principal)[0]);
                    b = null;
                }
                if (b == null) {
                    b = new StringBuilder();
                    lines.put(s.principal, b);
                    counts.put(s.principal, new int[1]);
                } else {
                    b.append('\n');
                }
                json(b, s);
                counts.get(s.principal)[0]++;
            } catch (RuntimeException e) {  // never the thread's end
                done(e, 1);
            }
        }
        for (Map.Entry<String, StringBuilder> e : lines.entrySet()) {
            send(e.getKey(), e.getValue(), counts.get(e.getKey())[0]);
        }
    }

    private void send(String principal, StringBuilder lines, int n) {
        if (producer == null && !made()) {
            failed.addAndGet(n);
            return;
        }
        try {
            byte[] key = principal.getBytes(StandardCharsets.UTF_8);
            byte[] value = lines.toString().getBytes(StandardCharsets.UTF_8);
            producer.send(new ProducerRecord<>(topic, key, value), (meta, e) -> done(e, n));
        } catch (Exception e) {  // the buffer full past max.block.ms, a closed producer
            done(e, n);
        }
    }

    /** The producer made (true), or not yet: tried again a minute after it could not be. */
    private boolean made() {
        long now = System.nanoTime();
        if (brokenAt != 0 && now - brokenAt < REMAKE_NANOS) {
            return false;
        }
        try {
            producer = new KafkaProducer<>(props);
            brokenAt = 0;
            return true;
        } catch (Exception e) {  // a setting it refuses, an address not resolved: again in a minute
            if (!broken) {
                broken = true;
                LOG.warn("pidquota plug-in: no inits published to {}: its producer cannot be made ({}); "
                    + "trying again every minute (said once)", topic, e.toString());
            }
            brokenAt = now;
            return false;
        }
    }

    String json(Seen s) {
        StringBuilder b = new StringBuilder(s.chars + 96);
        json(b, s);
        return b.toString();
    }

    /** One init as one line of JSON, appended to {@code b}. */
    void json(StringBuilder b, Seen s) {
        b.append("{\"v\":1,\"at_ms\":").append(s.atMs).append(",\"broker\":").append(brokerId)
            .append(",\"run\":\"").append(run).append("\",\"seq\":").append(s.seq).append(",\"principal\":");
        quote(b, s.principal);
        b.append(",\"client_id\":");
        quote(b, s.clientId);
        b.append(",\"client_address\":");
        quote(b, s.address == null ? null : s.address.getHostAddress());
        b.append(",\"listener\":");
        quote(b, s.listener);
        b.append(",\"transactional_id\":");
        quote(b, s.transactionalId);
        b.append(",\"outcome\":\"").append(s.outcome.name().toLowerCase(java.util.Locale.ROOT)).append('"');
        b.append(",\"software\":");
        quote(b, s.software);
        b.append('}');
    }

    /** A JSON string (null: {@code null}): quotes, backslashes and control characters escaped, a
     * lone surrogate written as U+FFFD (the record stays UTF-8, and pidquota reads it). */
    static void quote(StringBuilder b, String s) {
        if (s == null) {
            b.append("null");
            return;
        }
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (Character.isSurrogate(c) && !wellPaired(s, i)) {
                b.append("\\ufffd");  // no UTF-8 text holds a lone surrogate: the replacement character
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        b.append('"');
    }

    /** Whether the surrogate at {@code i} is half of a pair. */
    private static boolean wellPaired(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    /** A send's outcome, of {@code n} inits: said when three in a row fail, and once when they go
     * again. */
    private synchronized void done(Exception e, int n) {
        if (e == null) {
            published.addAndGet(n);
            inARow = 0;
            if (warned) {
                warned = false;
                LOG.info("pidquota plug-in: its inits reach {} again", topic);
            }
            return;
        }
        failed.addAndGet(n);
        if (++inARow >= 3) {
            said(e);
        }
    }

    private synchronized void said(Exception e) {
        if (!warned) {
            warned = true;
            LOG.warn("pidquota plug-in: cannot publish its inits to {} ({}); pidquota does not see them "
                + "(counted in InitsFailed)", topic, e.getClass().getSimpleName());
        }
    }

    private static int len(String s) {
        return s == null ? 0 : s.length();
    }

    private void closeProducer() {
        try {
            producer.close(Duration.ofSeconds(2));
        } catch (Exception e) {
            LOG.debug("pidquota plug-in: closing its inits producer: {}", e.toString());
        }
        producer = null;
    }

    void close() {
        running = false;
        thread.interrupt();
        try {
            thread.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (producer != null && !thread.isAlive()) {
            closeProducer();
        }
    }
}
