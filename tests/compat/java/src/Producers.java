import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.protocol.NamespaceUtil;

/** DefaultMQProducer scenarios: each sends ``--n`` numbered messages one way, then reads the topic back. */
final class Producers {
    private Producers() {
    }

    static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group, Driver.rpcHook());
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("p-" + System.nanoTime());
        String ns = Driver.opt("namespace", null);
        if (ns != null) {
            p.setNamespace(ns);
        }
        // async sends pick their queue on the executor's thread: one thread keeps the round robin in order
        p.setAsyncSenderExecutor(Executors.newSingleThreadExecutor());
        p.start();
        return p;
    }

    static void produce() throws Exception {
        String topic = Driver.opt("topic");
        String mode = Driver.opt("mode");
        int n = Driver.intOpt("n", 8);
        String ns = Driver.opt("namespace", null);
        Driver.createTopic(ns == null ? topic : NamespaceUtil.wrapNamespace(ns, topic));
        DefaultMQProducer p = producer("pg_" + topic);
        int stored = n;
        try {
            switch (mode) {
                case "sync":
                case "timeout":
                    for (int i = 0; i < n; i++) {
                        Message m = Driver.numbered(topic, i);
                        SendResult r = mode.equals("sync") ? p.send(m) : p.send(m, 15000);
                        Driver.emit("send", "idx", i, "result", Driver.sendResult(r));
                    }
                    break;
                case "async": {
                    SendResult[] results = new SendResult[n];
                    Throwable[] errors = new Throwable[n];
                    CountDownLatch done = new CountDownLatch(n);
                    for (int i = 0; i < n; i++) {
                        final int idx = i;
                        p.send(Driver.numbered(topic, i), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                results[idx] = r;
                                done.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                errors[idx] = e;
                                done.countDown();
                            }
                        }, 15000);
                    }
                    if (!done.await(60, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("async sends did not complete");
                    }
                    for (int i = 0; i < n; i++) {
                        Driver.emit("send", "idx", i, "result", results[i] == null ? null : Driver.sendResult(results[i]),
                                "error", errors[i] == null ? null : Driver.error(errors[i]));
                    }
                    break;
                }
                case "oneway":
                    for (int i = 0; i < n; i++) {
                        p.sendOneway(Driver.numbered(topic, i));
                    }
                    break;
                case "batch": {
                    // two batches: the first n/2 and the rest, each lands whole in one queue
                    for (int[] range : new int[][] {{0, n / 2}, {n / 2, n}}) {
                        List<Message> batch = new ArrayList<>();
                        for (int i = range[0]; i < range[1]; i++) {
                            batch.add(Driver.numbered(topic, i));
                        }
                        Driver.emit("send", "idx", range[0], "result", Driver.sendResult(p.send(batch)));
                    }
                    break;
                }
                case "order": {
                    MessageQueueSelector byOrder = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
                    for (int i = 0; i < n; i++) {
                        SendResult r = p.send(Driver.numbered(topic, i), byOrder, i % 3);
                        Driver.emit("send", "idx", i, "result", Driver.sendResult(r));
                    }
                    break;
                }
                case "delay": {
                    for (int i = 0; i < n; i++) {
                        Message m = Driver.numbered(topic, i);
                        m.setDelayTimeLevel(1);
                        Driver.emit("send", "idx", i, "result", Driver.sendResult(p.send(m)));
                    }
                    break;
                }
                case "errors": {
                    // what the broker refuses: the application sees the exception and its response code
                    stored = 0;
                    Message big = new Message(topic, new byte[Driver.intOpt("size", 4 * 1024 * 1024 + 1)]);
                    try {
                        p.send(big);
                    } catch (Exception e) {
                        Driver.emit("send", "case", "too-big", "error", Driver.error(e));
                    }
                    break;
                }
                default:
                    throw new IllegalArgumentException("mode " + mode);
            }
        } finally {
            p.shutdown();
        }
        Driver.readBack(topic, ns, stored);
        if (ns != null) {
            Driver.emit("raw-topic", "topic", NamespaceUtil.wrapNamespace(ns, topic));
            Driver.readBack(NamespaceUtil.wrapNamespace(ns, topic), null, stored);
        }
    }
}
