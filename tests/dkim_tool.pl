#!/usr/bin/perl
# An independent DKIM signer and verifier for the suite (Perl's Mail::DKIM, Debian's
# libmail-dkim-perl), so Relay's dkimpy is checked against another implementation.
#   dkim_tool.pl sign DOMAIN SELECTOR KEYFILE [METHOD [HEADERS]] < message   prints the message signed
#                                                            (METHOD: relaxed, the default, or relaxed/relaxed...;
#                                                            HEADERS: the fields to sign, a:b:c)
#   dkim_tool.pl verify DNS_PORT < message                   prints "result domain selector" per signature,
#                                                            looking keys up at 127.0.0.1:DNS_PORT
use strict;
use warnings;
use Mail::DKIM::Signer;
use Mail::DKIM::Verifier;
use Mail::DKIM::TextWrap;
use Net::DNS::Resolver;

my $mode = shift @ARGV or die "usage: dkim_tool.pl sign|verify ...\n";
binmode STDIN;
binmode STDOUT;
my @lines;
while (my $line = <STDIN>) {
    $line =~ s/\015?\012\z//;
    push @lines, $line;
}

if ($mode eq "sign") {
    my ($domain, $selector, $keyfile, $method, $headers) = @ARGV;
    my $signer = Mail::DKIM::Signer->new(
        Algorithm => "rsa-sha256", Method => $method // "relaxed", Domain => $domain, Selector => $selector,
        KeyFile => $keyfile, Headers => $headers // "from:to:subject:date:message-id");
    $signer->PRINT("$_\015\012") for @lines;
    $signer->CLOSE;
    print $signer->signature->as_string, "\015\012";
    print "$_\015\012" for @lines;
} elsif ($mode eq "verify") {
    my ($port) = @ARGV;
    Mail::DKIM::DNS::resolver(Net::DNS::Resolver->new(nameservers => ["127.0.0.1"], port => $port,
                                                      recurse => 0, udp_timeout => 2, tcp_timeout => 2));
    my $verifier = Mail::DKIM::Verifier->new();
    $verifier->PRINT("$_\015\012") for @lines;
    $verifier->CLOSE;
    foreach my $signature ($verifier->signatures) {
        print join(" ", $signature->result, $signature->domain, $signature->selector), "\n";
    }
} else {
    die "unknown mode $mode\n";
}
